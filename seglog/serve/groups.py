"""The group coordinator: Kafka's classic consumer-group protocol (``GroupCoordinator``), one node.

States, as in Kafka's ``GroupMetadata``::

    Empty --join--> PreparingRebalance --all members joined / rebalance timeout--> CompletingRebalance
    CompletingRebalance --leader's SyncGroup--> Stable
    Stable / CompletingRebalance --join of a new or changed member, leave, session expiry--> PreparingRebalance
    Stable / CompletingRebalance --a member's SyncGroup missing a rebalance timeout after the join--> PreparingRebalance
    any --last member gone--> Empty

A rebalance completes when every known member has sent JoinGroup again, or when the longest
rebalance timeout of the members passes (members that did not rejoin are removed); the first
rebalance of an empty group waits ``group.initial.rebalance.delay.ms`` more for other members, each
new member extending the wait up to the rebalance timeout. Completing it bumps the generation,
keeps the leader if it rejoined (else the first member), picks the first protocol of the leader's
list that every member supports, and answers every pending JoinGroup (the leader gets the members'
metadata). The leader's SyncGroup hands every member its assignment. A member that has not sent
its SyncGroup a rebalance timeout after the join was answered is removed and the others rebalance
(Kafka's pending-sync expiry), and a known member's JoinGroup with unchanged protocols while the
group waits for SyncGroup is answered with the current generation. A member that sends nothing
(heartbeat, join, sync, commit) for its session timeout is removed, which starts a rebalance; one
waiting for its JoinGroup or SyncGroup answer keeps its session until answered (a leader's slow
assignor does not expire the members waiting for it), as in Kafka.

Static membership (KIP-345, ``group.instance.id``), as Kafka's ``updateStaticMemberThenRebalanceOrCompleteJoin``:
a JoinGroup without member id from an instance id the group knows replaces that instance's member
(new member id, same assignment). In a Stable group whose selected protocol stays, it is answered at
once with the current generation and no rebalance (a returning leader is told it leads, with the
members and ``skip_assignment``, from JoinGroup v9, as KIP-814; at older versions, which cannot say
"skip", the leader id is the one before the replacement, so it acts as a follower until the next
rebalance, as Kafka answers them); otherwise the group rebalances. The replaced member id is
fenced: its waiting JoinGroup/SyncGroup and its next Heartbeat, SyncGroup, OffsetCommit, JoinGroup
or LeaveGroup get FENCED_INSTANCE_ID.
LeaveGroup may name a member by its instance id alone (admin clients' "remove members").

Differences from Kafka, for one node without a log: group metadata (members, generation) lives in
memory only, so after a restart members get UNKNOWN_MEMBER_ID and rejoin, resuming from the
committed offsets (:mod:`seglog.serve.group_offsets`), which do survive; a new member gets its id at
once (the v4+ ``MEMBER_ID_REQUIRED`` round trip is skipped, which clients accept).

Everything runs on the event loop thread; waiting requests (JoinGroup, SyncGroup) are futures.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import functools
import logging
import uuid
from collections.abc import Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Concatenate, ParamSpec

from kafka.protocol.consumer.metadata import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
    ConsumerProtocolType,
)

from indexer.errors import StorageError
from indexer.file_names import TopicPartition
from seglog.serve import protocol
from seglog.serve.group_offsets import CommittedOffset, GroupOffsets
from seglog.serve.live_groups import LiveGroup, LiveMember, PublishedGroups

logger = logging.getLogger(__name__)

# Kafka's broker defaults: group.min.session.timeout.ms, group.max.session.timeout.ms.
MIN_SESSION_TIMEOUT_MS = 6000
MAX_SESSION_TIMEOUT_MS = 1_800_000
_SWEEP_S = 0.1  # how often session expiry and rebalance deadlines are checked


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"


@dataclass(frozen=True, slots=True)
class JoinResult:
    """What a JoinGroup response carries."""

    error_code: int
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    member_id: str = ""
    members: tuple[tuple[str, str | None, bytes], ...] = ()  # (member id, instance id, metadata), for the leader
    skip_assignment: bool = False  # KIP-814: the leader keeps the assignment it has (JoinGroup v9+)


@dataclass(frozen=True, slots=True)
class SyncResult:
    """What a SyncGroup response carries."""

    error_code: int
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None


@dataclass
class Member:
    member_id: str
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    instance_id: str | None = None  # group.instance.id of a static member
    deadline: float = 0.0
    assignment: bytes = b""
    join: asyncio.Future[JoinResult] | None = None
    sync: asyncio.Future[SyncResult] | None = None

    def supports(self, name: str) -> bool:
        return any(p == name for p, _ in self.protocols)

    def waiting(self) -> bool:
        """Whether it waits for its JoinGroup or SyncGroup answer: it cannot heartbeat meanwhile (librdkafka
        sends none), so its session holds until answered, as Kafka's ``hasSatisfiedHeartbeat``."""
        return any(f is not None and not f.done() for f in (self.join, self.sync))


@dataclass
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> its member id
    rebalance_deadline: float = 0.0
    join_delay_until: float = 0.0
    pending_sync: set[str] = field(default_factory=set)  # members of this generation yet to send SyncGroup
    sync_deadline: float = 0.0  # when the members still in pending_sync are removed

    def add(self, member: Member) -> None:
        """Make ``member`` a member (the member of its instance id, for a static one)."""
        self.members[member.member_id] = member
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id

    def remove(self, member_id: str) -> Member | None:
        """Remove a member (and its instance id's entry); the member, or None if it was none."""
        member = self.members.pop(member_id, None)
        self.pending_sync.discard(member_id)
        if member is not None and member.instance_id is not None:
            if self.static_members.get(member.instance_id) == member_id:
                del self.static_members[member.instance_id]
        return member

    def rebalance_timeout_s(self) -> float:
        """The longest rebalance timeout of the members (Kafka's ``GroupMetadata.rebalanceTimeoutMs``)."""
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0) / 1000

    def fenced(self, member_id: str, instance_id: str | None) -> bool:
        """Kafka's ``isStaticMemberFenced``: ``instance_id`` now belongs to another member id."""
        owner = self.static_members.get(instance_id) if instance_id is not None else None
        return owner is not None and owner != member_id

    def select_protocol(self) -> str:
        """The first protocol of the leader's list that every member supports."""
        assert self.leader is not None
        return next(
            name
            for name, _ in self.members[self.leader].protocols
            if all(m.supports(name) for m in self.members.values())
        )


def offset_delete_errors(
    protocol_type: str | None, subscribed: frozenset[str] | None, partitions: Iterable[TopicPartition]
) -> tuple[int, dict[TopicPartition, int]]:
    """Kafka's ``handleDeleteOffsets`` for a group WITH members: the group's error code and each
    partition's. A group of another protocol than ``consumer`` is NON_EMPTY_GROUP; a consumer group
    keeps the offsets of the topics its members subscribe to (GROUP_SUBSCRIBED_TO_TOPIC: they would
    commit them again), every topic when those are not known (``subscribed`` None), as Kafka."""
    if protocol_type != ConsumerProtocolType:
        return protocol.NON_EMPTY_GROUP, {}
    return protocol.NONE, {
        tp: protocol.GROUP_SUBSCRIBED_TO_TOPIC if subscribed is None or tp[0] in subscribed else protocol.NONE
        for tp in partitions
    }


_P = ParamSpec("_P")


def _answered_once_published(
    join: Callable[Concatenate[GroupCoordinator, _P], Coroutine[Any, Any, JoinResult]],
) -> Callable[Concatenate[GroupCoordinator, _P], Coroutine[Any, Any, JoinResult]]:
    """A successful join answers only once the group's members are published (another process's
    ``seglog groups`` sees the member the client was told about)."""

    @functools.wraps(join)
    async def publishing(coordinator: GroupCoordinator, /, *args: _P.args, **kwargs: _P.kwargs) -> JoinResult:
        result = await join(coordinator, *args, **kwargs)
        if result.error_code == protocol.NONE:
            await coordinator.publish()
        return result

    return publishing


class GroupCoordinator:
    """Every consumer group of the server, and their committed offsets. With ``published``, the groups
    with members are published for ``seglog groups`` (:mod:`seglog.serve.live_groups`): each member
    before its JoinGroup is answered, the rest (assignments, members gone) within a sweep."""

    def __init__(
        self,
        offsets: GroupOffsets,
        *,
        initial_rebalance_delay_ms: int = 3000,
        published: PublishedGroups | None = None,
    ) -> None:
        self.offsets = offsets
        self.initial_rebalance_delay_s = initial_rebalance_delay_ms / 1000
        self._groups: dict[str, Group] = {}
        self._published = published
        self._publish_lock = asyncio.Lock()
        self._last_published: list[LiveGroup] = []
        self._publish_error: str | None = None
        self._publishing: asyncio.Task[None] | None = None

    @staticmethod
    def _now() -> float:
        return asyncio.get_running_loop().time()

    def group(self, group_id: str) -> Group | None:
        """The group's in-memory state, if it has members or had some since the server started."""
        return self._groups.get(group_id)

    def listed(self) -> list[Group]:
        """Every group, as Kafka's ListGroups and DescribeGroups know them: the ones with members since
        the server started, and the ones with committed offsets only (``Empty``, no protocol type)."""
        known = {group_id: Group(group_id) for group_id in self.offsets.groups()}
        known.update(self._groups)
        return [known[group_id] for group_id in sorted(known)]

    # -- membership ------------------------------------------------------------------------------

    @_answered_once_published
    async def join(
        self,
        group_id: str,
        member_id: str,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        instance_id: str | None = None,
        *,
        can_skip_assignment: bool = False,
    ) -> JoinResult:
        """JoinGroup: wait for the rebalance this join starts or joins, then answer (at once for a
        static member that comes back to a Stable group, see the module's docstring), once the member
        is published (:meth:`publish`). ``can_skip_assignment``: the request's version has KIP-814's
        ``skip_assignment`` (v9+)."""
        if not group_id:
            return JoinResult(protocol.INVALID_GROUP_ID, member_id=member_id)
        if not MIN_SESSION_TIMEOUT_MS <= session_timeout_ms <= MAX_SESSION_TIMEOUT_MS:
            return JoinResult(protocol.INVALID_SESSION_TIMEOUT, member_id=member_id)
        group = self._groups.setdefault(group_id, Group(group_id))
        if member_id and group.fenced(member_id, instance_id):
            return JoinResult(protocol.FENCED_INSTANCE_ID, member_id=member_id)
        if member_id and (
            member_id not in group.members or (instance_id is not None and instance_id not in group.static_members)
        ):
            return JoinResult(protocol.UNKNOWN_MEMBER_ID, member_id=member_id)
        others = [m for m in group.members.values() if m.member_id != member_id]
        if (
            not protocols
            or others
            and (
                protocol_type != group.protocol_type
                or not any(all(o.supports(name) for o in others) for name, _ in protocols)
            )
        ):
            return JoinResult(protocol.INCONSISTENT_GROUP_PROTOCOL, member_id=member_id)
        now = self._now()
        rebalance_timeout_ms = rebalance_timeout_ms if rebalance_timeout_ms > 0 else session_timeout_ms
        existing = group.members.get(member_id)
        if existing is not None and self._rejoin_changes_nothing(group, existing, protocols):
            existing.deadline = now + session_timeout_ms / 1000
            return self._join_result(group, existing)
        replaced = None  # the member a static member that comes back replaces
        replaced_owed_sync = False  # it had yet to send SyncGroup: so has its replacement
        if existing is None:
            member_id = f"{instance_id or client_id or 'member'}-{uuid.uuid4()}"
            if instance_id is not None and instance_id in group.static_members:
                replaced_owed_sync = group.static_members[instance_id] in group.pending_sync
                replaced = group.remove(group.static_members[instance_id])
                assert replaced is not None
                logger.info(
                    "group %s: static member %s rejoins as %s, replacing %s",
                    group_id,
                    instance_id,
                    member_id,
                    replaced.member_id,
                )
            else:
                logger.info("group %s: member %s joins", group_id, member_id)
        member = Member(
            member_id,
            client_id,
            client_host,
            session_timeout_ms,
            rebalance_timeout_ms,
            protocol_type,
            protocols,
            instance_id=instance_id,
        )
        kept = existing or replaced
        if kept is not None:
            member.assignment = kept.assignment
        member.deadline = now + session_timeout_ms / 1000
        if replaced is not None:
            self._answer_waiting(replaced, protocol.FENCED_INSTANCE_ID)
            previous_leader = group.leader
            if group.leader == replaced.member_id:
                group.leader = member_id
            group.add(member)
            if replaced_owed_sync:
                group.pending_sync.add(member_id)
            if group.state is GroupState.STABLE and group.select_protocol() == group.protocol_name:
                # No rebalance. A returning leader must not compute an assignment that a Stable group
                # would not hand out: from v9 it is told it leads and to skip the assignment (KIP-814,
                # so it keeps watching the metadata); before, it is given the leader id it replaced.
                if can_skip_assignment:
                    return dataclasses.replace(
                        self._join_result(group, member), skip_assignment=member_id == group.leader
                    )
                return dataclasses.replace(self._join_result(group, member), leader=previous_leader or "", members=())
        joined: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        member.join = joined
        if existing is not None and existing.join is not None and not existing.join.done():
            existing.join.set_result(JoinResult(protocol.UNKNOWN_MEMBER_ID, member_id=member_id))  # superseded
        group.add(member)
        group.protocol_type = protocol_type
        if group.state is not GroupState.PREPARING_REBALANCE:
            self._prepare_rebalance(group, now, f"member {member_id} joined")
        elif now < group.join_delay_until:  # still gathering the first members: wait a bit longer for more
            group.join_delay_until = min(now + self.initial_rebalance_delay_s, group.rebalance_deadline)
        group.rebalance_deadline = max(group.rebalance_deadline, now + rebalance_timeout_ms / 1000)
        self._maybe_complete_join(group, now)  # may answer at once (then member.join is None again)
        return await joined

    @staticmethod
    def _rejoin_changes_nothing(group: Group, member: Member, protocols: list[tuple[str, bytes]]) -> bool:
        """Whether a JoinGroup from ``member`` with unchanged ``protocols`` is answered with the current
        generation instead of a rebalance, as Kafka's ``doCurrentMemberJoinGroup``: while the group
        waits for SyncGroup (the member resends a JoinGroup whose answer it missed, as clients do on a
        request timeout), and in a Stable group unless it is the leader's (the leader rejoins to
        rebalance on a change its metadata does not show, such as a topic's partition count)."""
        if member.protocols != protocols:
            return False
        return group.state is GroupState.COMPLETING_REBALANCE or (
            group.state is GroupState.STABLE and member.member_id != group.leader
        )

    def _prepare_rebalance(self, group: Group, now: float, reason: str) -> None:
        logger.info("group %s: rebalancing (generation %d, %s)", group.group_id, group.generation, reason)
        if group.state is GroupState.COMPLETING_REBALANCE:
            for member in group.members.values():
                self._answer_sync(member, SyncResult(protocol.REBALANCE_IN_PROGRESS))
        was_empty = group.state is GroupState.EMPTY
        group.state = GroupState.PREPARING_REBALANCE
        group.pending_sync.clear()
        group.rebalance_deadline = now + group.rebalance_timeout_s()
        delay_until = min(now + self.initial_rebalance_delay_s, group.rebalance_deadline)
        group.join_delay_until = delay_until if was_empty else now

    def _maybe_complete_join(self, group: Group, now: float) -> None:
        if group.state is not GroupState.PREPARING_REBALANCE:
            return
        all_joined = all(m.join is not None and not m.join.done() for m in group.members.values())
        if (all_joined and now >= group.join_delay_until) or now >= group.rebalance_deadline:
            self._complete_join(group, now)

    def _complete_join(self, group: Group, now: float) -> None:
        for member in [m for m in group.members.values() if m.join is None or m.join.done()]:
            logger.info("group %s: member %s did not rejoin in time: removed", group.group_id, member.member_id)
            group.remove(member.member_id)
        group.generation += 1
        if not group.members:
            group.state, group.leader, group.protocol_name = GroupState.EMPTY, None, None
            logger.info("group %s: empty at generation %d", group.group_id, group.generation)
            return
        if group.leader not in group.members:
            group.leader = next(iter(group.members))
        group.protocol_name = group.select_protocol()
        group.state = GroupState.COMPLETING_REBALANCE
        group.pending_sync = set(group.members)
        group.sync_deadline = now + group.rebalance_timeout_s()
        logger.info(
            "group %s: generation %d with %d members, leader %s, protocol %s",
            group.group_id,
            group.generation,
            len(group.members),
            group.leader,
            group.protocol_name,
        )
        for member in group.members.values():
            member.deadline = now + member.session_timeout_ms / 1000
            member.assignment = b""
            assert member.join is not None
            member.join.set_result(self._join_result(group, member))
            member.join = None

    def _join_result(self, group: Group, member: Member) -> JoinResult:
        members: tuple[tuple[str, str | None, bytes], ...] = ()
        if member.member_id == group.leader:
            members = tuple(
                (m.member_id, m.instance_id, next(meta for name, meta in m.protocols if name == group.protocol_name))
                for m in group.members.values()
            )
        return JoinResult(
            protocol.NONE,
            group.generation,
            group.protocol_type,
            group.protocol_name,
            group.leader or "",
            member.member_id,
            members,
        )

    def _member(
        self, group_id: str, member_id: str, instance_id: str | None, generation: int
    ) -> tuple[Group | None, Member | None, int]:
        """Look a member up as SyncGroup/Heartbeat/OffsetCommit do; the error code if it is not current."""
        group = self._groups.get(group_id)
        if group is not None and group.fenced(member_id, instance_id):
            return group, None, protocol.FENCED_INSTANCE_ID
        member = group.members.get(member_id) if group is not None else None
        if group is None or member is None:
            return group, None, protocol.UNKNOWN_MEMBER_ID
        member.deadline = self._now() + member.session_timeout_ms / 1000
        if generation != group.generation:
            return group, member, protocol.ILLEGAL_GENERATION
        return group, member, protocol.NONE

    async def sync(
        self,
        group_id: str,
        member_id: str,
        generation: int,
        assignments: Mapping[str, bytes],
        instance_id: str | None = None,
    ) -> SyncResult:
        """SyncGroup: the leader's call hands out the assignments; the others wait for it."""
        group, member, error = self._member(group_id, member_id, instance_id, generation)
        if error != protocol.NONE or group is None or member is None:
            return SyncResult(error)
        if group.state is GroupState.PREPARING_REBALANCE:
            return SyncResult(protocol.REBALANCE_IN_PROGRESS)
        group.pending_sync.discard(member_id)
        if group.state is GroupState.STABLE:
            return SyncResult(protocol.NONE, member.assignment, group.protocol_type, group.protocol_name)
        member.sync = asyncio.get_running_loop().create_future()
        if member_id == group.leader:
            for m in group.members.values():
                m.assignment = bytes(assignments.get(m.member_id, b""))
            group.state = GroupState.STABLE
            logger.info("group %s: generation %d stable", group.group_id, group.generation)
            for m in group.members.values():
                self._answer_sync(m, SyncResult(protocol.NONE, m.assignment, group.protocol_type, group.protocol_name))
                m.sync = None
            return SyncResult(protocol.NONE, member.assignment, group.protocol_type, group.protocol_name)
        return await member.sync

    def heartbeat(self, group_id: str, member_id: str, generation: int, instance_id: str | None = None) -> int:
        """Heartbeat: keeps the member's session; REBALANCE_IN_PROGRESS tells it to rejoin."""
        group, _member, error = self._member(group_id, member_id, instance_id, generation)
        if error != protocol.NONE or group is None:
            return error
        return protocol.REBALANCE_IN_PROGRESS if group.state is GroupState.PREPARING_REBALANCE else protocol.NONE

    def leave(self, group_id: str, leaving: list[tuple[str, str | None]]) -> list[int]:
        """LeaveGroup: remove each ``(member id, instance id)`` member, a static one by its instance id
        alone if its member id is empty (its error code each); the rest of the group rebalances."""
        group = self._groups.get(group_id)
        errors = []
        for member_id, instance_id in leaving:
            if group is not None and member_id and group.fenced(member_id, instance_id):
                errors.append(protocol.FENCED_INSTANCE_ID)
                continue
            if group is not None and instance_id is not None and instance_id in group.static_members:
                member_id = group.static_members[instance_id]
            member = group.remove(member_id) if group is not None else None
            if member is None:
                errors.append(protocol.UNKNOWN_MEMBER_ID)
                continue
            assert group is not None
            logger.info("group %s: member %s left", group_id, member_id)
            self._members_gone(group, [member], f"member {member_id} left")
            errors.append(protocol.NONE)
        return errors

    def _answer_sync(self, member: Member, result: SyncResult) -> None:
        """Answer the SyncGroup ``member`` waits in, if any; its session starts again from now (as
        Kafka's ``propagateAssignment``): it could not heartbeat while it waited."""
        if member.sync is not None and not member.sync.done():
            member.sync.set_result(result)
            member.deadline = self._now() + member.session_timeout_ms / 1000

    def _answer_waiting(self, member: Member, error: int) -> None:
        """Answer the JoinGroup and SyncGroup ``member`` waits in (if any) with ``error``."""
        if member.join is not None and not member.join.done():
            member.join.set_result(JoinResult(error, member_id=member.member_id))
        self._answer_sync(member, SyncResult(error))

    def _members_gone(self, group: Group, members: list[Member], reason: str) -> None:
        """After ``members`` were removed from ``group``: answer what they wait for, and rebalance the
        rest of the group (or finish the rebalance under way; or leave the group Empty)."""
        for member in members:
            self._answer_waiting(member, protocol.UNKNOWN_MEMBER_ID)
        now = self._now()
        if not group.members:
            if group.state is not GroupState.EMPTY:
                group.generation += 1
            group.state, group.leader, group.protocol_name = GroupState.EMPTY, None, None
            group.pending_sync.clear()
        elif group.state is GroupState.PREPARING_REBALANCE:
            self._maybe_complete_join(group, now)
        else:
            self._prepare_rebalance(group, now, reason)

    def _expire_pending_sync(self, group: Group, now: float) -> None:
        """Remove the members that did not send SyncGroup within the rebalance timeout after their
        JoinGroup was answered, as Kafka's ``onExpirePendingSync``: a stalled member (its session kept
        by heartbeats or a long ``session.timeout.ms``) would hold the group in CompletingRebalance, and
        the members waiting for the leader's assignment with it."""
        if not group.pending_sync or now < group.sync_deadline:
            return
        stalled = [group.members[member_id] for member_id in sorted(group.pending_sync)]
        for member in stalled:
            logger.info("group %s: member %s did not send SyncGroup in time: removed", group.group_id, member.member_id)
            group.remove(member.member_id)
        self._members_gone(group, stalled, f"{len(stalled)} members did not send SyncGroup")

    async def expire_sessions(self) -> None:
        """Remove members whose session expired and finish rebalances that timed out, until cancelled."""
        while True:
            await asyncio.sleep(_SWEEP_S)
            now = self._now()
            for group in list(self._groups.values()):
                for member in list(group.members.values()):
                    if not member.waiting() and now > member.deadline and member.member_id in group.members:
                        logger.info("group %s: member %s session expired", group.group_id, member.member_id)
                        group.remove(member.member_id)
                        self._members_gone(group, [member], f"member {member.member_id} session expired")
                self._maybe_complete_join(group, now)
                self._expire_pending_sync(group, now)
            if self._publishing is None or self._publishing.done():  # assignments, members gone
                self._publishing = asyncio.get_running_loop().create_task(self.publish(), name="group-publish")

    # -- offsets ---------------------------------------------------------------------------------

    async def commit_offsets(
        self,
        group_id: str,
        member_id: str,
        generation: int,
        offsets: Mapping[TopicPartition, CommittedOffset],
        instance_id: str | None = None,
    ) -> int:
        """OffsetCommit for the partitions given (already checked to exist); one error code for all.

        Raises:
            StorageError: the offsets file could not be written.
        """
        if not group_id:
            return protocol.INVALID_GROUP_ID
        group = self._groups.get(group_id)
        if generation < 0 and not member_id:
            if group is not None and group.members:  # a standalone commit into a live group
                return protocol.UNKNOWN_MEMBER_ID
        else:
            group, _member, error = self._member(group_id, member_id, instance_id, generation)
            if error != protocol.NONE or group is None:
                return error
            # A member of the current generation commits while a rebalance is prepared (what it read
            # before giving its partitions up, as Kafka accepts); not before the new one is synced.
            if group.state is GroupState.COMPLETING_REBALANCE:
                return protocol.REBALANCE_IN_PROGRESS
        await self.offsets.commit(group_id, offsets)
        return protocol.NONE

    async def delete(self, group_id: str) -> int:
        """DeleteGroups for one group without members: its committed offsets and its state go.

        Raises:
            StorageError: the offsets file could not be written (the group stays).
        """
        group = self._groups.get(group_id)
        if group is not None and group.members:
            return protocol.NON_EMPTY_GROUP
        if group is None and group_id not in self.offsets.groups():
            return protocol.GROUP_ID_NOT_FOUND
        await self.offsets.delete(group_id)
        group = self._groups.get(group_id)
        if group is not None and not group.members:  # no one joined while the file was written
            del self._groups[group_id]
        logger.info("group %s: deleted", group_id)
        return protocol.NONE

    async def delete_offsets(
        self, group_id: str, partitions: list[TopicPartition]
    ) -> tuple[int, dict[TopicPartition, int]]:
        """OffsetDelete of ``partitions`` (already checked to exist), as Kafka's ``handleDeleteOffsets``:
        the group's error code, and each partition's. A group without members loses them all; a
        consumer group with members keeps those of the topics its members subscribe to
        (GROUP_SUBSCRIBED_TO_TOPIC: they would commit them again), and a group of another protocol
        with members is NON_EMPTY_GROUP.

        Raises:
            StorageError: the offsets file could not be written (the offsets stay).
        """
        if not group_id:
            return protocol.INVALID_GROUP_ID, {}
        group = self._groups.get(group_id)
        if group is None and group_id not in self.offsets.groups():
            return protocol.GROUP_ID_NOT_FOUND, {}
        errors = {tp: protocol.NONE for tp in partitions}
        if group is not None and group.members:
            error, errors = offset_delete_errors(group.protocol_type, self._subscribed_topics(group), partitions)
            if error != protocol.NONE:
                return error, {}
        deletable = [tp for tp, error in errors.items() if error == protocol.NONE]
        if deletable:
            await self.offsets.delete(group_id, deletable)
            logger.info("group %s: offsets of %d partitions deleted", group_id, len(deletable))
        return protocol.NONE, errors

    @staticmethod
    def _subscribed_topics(group: Group) -> frozenset[str] | None:
        """The topics a consumer group's members subscribe to, from their metadata for the group's
        protocol (Kafka's ``GroupMetadata.subscribedTopics``); None if that is not known (no protocol
        chosen yet, metadata that does not parse), and then every topic counts as subscribed, as in
        Kafka."""
        if group.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in group.members.values():
            metadata = next((meta for name, meta in member.protocols if name == group.protocol_name), None)
            try:
                topics.update(ConsumerProtocolSubscription.decode(metadata).topics)
            except Exception:  # kafka-python raises ValueError/struct.error/TypeError/... on bad bytes
                return None
        return frozenset(topics)

    # -- published for seglog groups ------------------------------------------------------------

    def live_groups(self) -> list[LiveGroup]:
        """The groups with members, as :mod:`seglog.serve.live_groups` publishes them (a consumer
        group's assignments decoded once it is Stable)."""
        return [
            LiveGroup(
                group.group_id,
                group.state.value,
                group.protocol_type,
                self._subscribed_topics(group),
                tuple(
                    LiveMember(m.member_id, m.client_id, m.client_host, m.instance_id, self._assigned(group, m))
                    for m in group.members.values()
                ),
            )
            for group in self._groups.values()
            if group.members
        ]

    @staticmethod
    def _assigned(group: Group, member: Member) -> tuple[TopicPartition, ...]:
        if group.state is not GroupState.STABLE or group.protocol_type != ConsumerProtocolType:
            return ()
        try:
            assignment = ConsumerProtocolAssignment.decode(member.assignment)
            return tuple(sorted((str(tp.topic), int(tp.partition)) for tp in assignment.partitions()))
        except Exception:  # bytes a leader made up (kafka-python raises several types): nothing to show
            return ()

    async def publish(self) -> None:
        """Publish :meth:`live_groups` if it changed since the last time; returns once it is on disk. A
        failure is logged (once per message) and the server goes on: ``seglog groups`` could not
        delete offsets in a directory that this server cannot write in either."""
        if self._published is None:
            return
        async with self._publish_lock:
            groups = self.live_groups()
            if groups == self._last_published:
                return
            try:
                await self.offsets.locked(functools.partial(self._published.write, groups))
            except StorageError as e:
                if str(e) != self._publish_error:
                    logger.error("cannot publish the group members for seglog groups: %s", e)
                self._publish_error = str(e)
                return
            self._last_published, self._publish_error = groups, None

    def close(self) -> None:
        """Remove what was published (the server stops)."""
        if self._published is not None:
            self._published.close()

    def fetch_offsets(self, group_id: str) -> dict[TopicPartition, CommittedOffset]:
        """The group's committed offsets."""
        return self.offsets.get(group_id)

    def run(self) -> asyncio.Task[None]:
        """Start the session sweeper (cancel the task to stop it)."""
        return asyncio.get_running_loop().create_task(self.expire_sessions(), name="group-sessions")
