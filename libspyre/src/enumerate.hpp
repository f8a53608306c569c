// Enumeration of Spyre cards: accel-class devices whose PCI parent is bound to the spyre
// driver, found through libudev (libdrm cannot enumerate accel nodes).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace spyre {

struct DeviceNode {
    std::string accel_path;   // "/dev/accel/accel0"
    std::string syspath;      // "/sys/devices/pci0000:00/0000:00:03.0/accel/accel0"
    std::string pci_address;  // "0000:00:03.0"
    unsigned minor = 0;
};

// All spyre accel nodes, sorted by minor number; the position is the device index.
std::vector<DeviceNode> enumerate_devices();

// Why no device was found, and what to do about it.
std::string no_device_message();

}  // namespace spyre
