"""Job information of a training process (``npu_bridge.estimator.npu.npu_common``).

:class:`NPUBasics` reads the job description once per process (a singleton, as in the
original): from the JSON job file the cluster scheduler writes (``job_start_file``), or, when the
file cannot be opened, from the environment: ``JOB_ID`` (required; without it the job info is
None), ``HEARTBEAT``, ``RANK_TABLE_FILE``, ``POD_NAME`` (else ``RANK_ID``) as the device index,
``LOCAL_CHECKPOINT_DIR`` and the rank size (``RANK_SIZE``/``CM_WORKER_SIZE``, default 1).

The job file holds ``{"device_info": {"Index": <int >= 0>}, "rank_table_file": <str>,
"rank_size": <int > 0>, "local_checkpoint_dir": <str, optional>}``; a missing or invalid entry
raises the check's ``ValueError``/``TypeError`` naming it, and a file that is not JSON raises
``ValueError`` naming the file.
"""

import json
import os
import threading

from absl import logging

from npu_bridge.estimator.npu import util as util_lib

__all__ = ["DeviceInfo", "JobConfig", "JobInfo", "NPUBasics"]


class JobInfo:
    """Job information sent by the cluster scheduler (stored as ``_<argument>`` attributes)."""

    def __init__(self, job_id=0, job_config=None, heartbeat_time=-1, region_id=None, ak=None,
                 sk=None, endpoint_url=None, device_info=None, rank_table_file=None,
                 restart_flag=0, local_app_dir=None, local_data_dir=None,
                 local_checkpoint_dir=None, local_log_dir=None, local_result_dir=None,
                 local_boot_file=None, rank_size=1):
        self._job_id = job_id
        self._job_config = job_config
        self._heartbeat_time = heartbeat_time
        self._region_id = region_id
        self._ak = ak
        self._sk = sk
        self._endpoint_url = endpoint_url
        self._device_info = device_info
        self._rank_table_file = rank_table_file
        self._restart_flag = restart_flag
        self._local_app_dir = local_app_dir
        self._local_data_dir = local_data_dir
        self._local_checkpoint_dir = local_checkpoint_dir
        self._local_log_dir = local_log_dir
        self._local_result_dir = local_result_dir
        self._local_boot_file = local_boot_file
        self._rank_size = rank_size


class JobConfig:
    """Training configuration of a job: learning rate and batch size."""

    def __init__(self, learning_rate=None, batch_size=None):
        self._learning_rate = learning_rate
        self._batch_size = batch_size


class DeviceInfo:
    """The device of this process: ``index`` (its identifier), ``server_id``, ``dev_index``."""

    def __init__(self, index="0", server_id="123456", dev_index=1):
        self._index = index
        self._server_id = server_id
        self._dev_index = dev_index
        self._root_rank = 0

    def is_master_node(self):
        """True when this device is the root rank (its index equals the root rank 0)."""
        return str(self._index) == str(self._root_rank)


class NPUBasics:
    """The job information of this process, read once (see the module doc)."""

    _instance = None
    _lock = threading.Lock()

    def __new__(cls, file_name):
        with cls._lock:
            if cls._instance is None:
                instance = object.__new__(cls)
                instance._job_info = instance._read_job_info(file_name)
                cls._instance = instance
            return cls._instance

    def __init__(self, file_name):
        pass  # the singleton was filled in __new__

    @property
    def jobinfo(self):
        """The :class:`JobInfo` (None when neither the file nor ``JOB_ID`` gave one)."""
        return self._job_info

    def size(self):
        """Number of TensorFlow processes of the job (its rank size)."""
        return self._job_info._rank_size

    @staticmethod
    def _read_job_file(file_name, data):
        if not isinstance(data, dict):
            raise ValueError(f"job file {file_name}: expected a JSON object")
        device_info = data.get("device_info")
        util_lib.check_not_none(device_info, "device_info")
        index = device_info.get("Index") if isinstance(device_info, dict) else None
        util_lib.check_nonnegative_integer(index, "Index")
        rank_table_file = data.get("rank_table_file")
        util_lib.check_not_none(rank_table_file, "rank_table_file")
        rank_size = data.get("rank_size")
        util_lib.check_positive_integer(rank_size, "rank_size")
        return JobInfo(device_info=DeviceInfo(index=str(index)),
                       rank_table_file=rank_table_file,
                       local_checkpoint_dir=data.get("local_checkpoint_dir"),
                       rank_size=rank_size)

    @staticmethod
    def _read_job_env():
        job_id = os.environ.get("JOB_ID", "")
        if not job_id:
            logging.error("can not get job config from env: JOB_ID is not set")
            return None
        identity = os.environ.get("POD_NAME", "") or os.environ.get("RANK_ID", "")
        rank_size = util_lib.get_ranksize()
        rank_size = int(rank_size) if str(rank_size).isdigit() else 1
        return JobInfo(job_id=job_id, heartbeat_time=os.environ.get("HEARTBEAT", ""),
                       device_info=DeviceInfo(index=str(identity)),
                       rank_table_file=os.environ.get("RANK_TABLE_FILE", ""),
                       local_checkpoint_dir=os.environ.get("LOCAL_CHECKPOINT_DIR", ""),
                       rank_size=rank_size)

    def _read_job_info(self, file_name):
        try:
            with open(file_name, encoding="utf-8") as handle:
                content = handle.read()
        except (OSError, TypeError):
            logging.warning("job config file %r does not exist; reading the environment",
                            file_name)
            return self._read_job_env()
        try:
            data = json.loads(content)
        except ValueError as error:
            raise ValueError(f"job file {file_name} is not valid JSON: {error}") from None
        return self._read_job_file(file_name, data)

    @classmethod
    def _reset_for_tests(cls):
        """Forget the singleton (tests only)."""
        with cls._lock:
            cls._instance = None
