"""Scheduled maintenance of segment logs, the daemon and the recovery command (see docs/maintenance.md).

Importing this package loads APScheduler (the scheduler); the command line imports the modules it
needs lazily instead.
"""

from maintenance.access import BorrowedLogs as BorrowedLogs
from maintenance.access import LogAccess as LogAccess
from maintenance.access import OwnedLogs as OwnedLogs
from maintenance.daemon import run_daemon as run_daemon
from maintenance.daemon import run_once as run_once
from maintenance.jobs import JOBS as JOBS
from maintenance.jobs import Job as Job
from maintenance.recovery import DirectoryRecovery as DirectoryRecovery
from maintenance.recovery import PartitionRecovery as PartitionRecovery
from maintenance.recovery import recover_log_dir as recover_log_dir
from maintenance.report import JobReport as JobReport
from maintenance.report import PartitionError as PartitionError
from maintenance.scheduler import MaintenanceHandle as MaintenanceHandle
from maintenance.scheduler import start_maintenance as start_maintenance
from maintenance.settings import MaintenanceSettings as MaintenanceSettings

__all__ = [
    "JOBS",
    "BorrowedLogs",
    "DirectoryRecovery",
    "Job",
    "JobReport",
    "LogAccess",
    "MaintenanceHandle",
    "MaintenanceSettings",
    "OwnedLogs",
    "PartitionError",
    "PartitionRecovery",
    "recover_log_dir",
    "run_daemon",
    "run_once",
    "start_maintenance",
]
