"""The virtual device: identity, models, buffers, calls, fixed tasks, records. See virtual_device.py."""

from npu_sim.device.buffers import BufferStatus, OutputBuffer
from npu_sim.device.fixed_task import FixedTask
from npu_sim.device.identity import (
    CALRT_VERSION,
    DEVICE_CONFIG_ENV,
    DRIVER_VERSION,
    FIRMWARE_VERSION,
    DeviceConfigError,
    DeviceIdentity,
    load_device_config,
)
from npu_sim.device.models import Chiplet, ModelHandle
from npu_sim.device.records import CallRecord
from npu_sim.device.virtual_device import MAX_IN_FLIGHT, DeviceStatus, VirtualDevice

__all__ = [
    "CALRT_VERSION",
    "DEVICE_CONFIG_ENV",
    "DRIVER_VERSION",
    "FIRMWARE_VERSION",
    "MAX_IN_FLIGHT",
    "BufferStatus",
    "CallRecord",
    "Chiplet",
    "DeviceConfigError",
    "DeviceIdentity",
    "DeviceStatus",
    "FixedTask",
    "ModelHandle",
    "OutputBuffer",
    "VirtualDevice",
    "load_device_config",
]
