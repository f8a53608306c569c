#include "enumerate.hpp"

#include <libudev.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <cstring>
#include <format>
#include <memory>

#include "error.hpp"

extern "C" {
#include "spyre_hw.h"
}

namespace spyre {

namespace {

struct UdevDeleter {
    void operator()(udev* u) const { udev_unref(u); }
    void operator()(udev_enumerate* e) const { udev_enumerate_unref(e); }
    void operator()(udev_device* d) const { udev_device_unref(d); }
};
template <typename T>
using UdevPtr = std::unique_ptr<T, UdevDeleter>;

bool path_exists(const char* path) {
    struct stat st;
    return ::stat(path, &st) == 0;
}

}  // namespace

std::vector<DeviceNode> enumerate_devices() {
    std::vector<DeviceNode> nodes;
    UdevPtr<udev> u(udev_new());
    if (!u) fail(SPYRE_ERROR_IO, "udev_new() failed: cannot enumerate devices");
    UdevPtr<udev_enumerate> en(udev_enumerate_new(u.get()));
    if (!en) fail(SPYRE_ERROR_IO, "udev_enumerate_new() failed: cannot enumerate devices");
    udev_enumerate_add_match_subsystem(en.get(), "accel");
    if (udev_enumerate_scan_devices(en.get()) < 0)
        fail(SPYRE_ERROR_IO, "udev: scanning the accel subsystem failed (is /sys mounted?)");

    udev_list_entry* entry;
    udev_list_entry_foreach(entry, udev_enumerate_get_list_entry(en.get())) {
        const char* syspath = udev_list_entry_get_name(entry);
        UdevPtr<udev_device> dev(udev_device_new_from_syspath(u.get(), syspath));
        if (!dev) continue;
        // The accel node's parent is the PCI function; it names the bound driver.
        udev_device* pci = udev_device_get_parent_with_subsystem_devtype(dev.get(), "pci", nullptr);
        if (!pci) continue;
        const char* driver = udev_device_get_driver(pci);
        if (!driver || std::strcmp(driver, "spyre") != 0) continue;

        DeviceNode node;
        node.syspath = syspath;
        node.pci_address = udev_device_get_sysname(pci);
        const char* devnode = udev_device_get_devnode(dev.get());
        node.accel_path =
            devnode ? devnode : std::string("/dev/accel/") + udev_device_get_sysname(dev.get());
        node.minor = minor(udev_device_get_devnum(dev.get()));
        nodes.push_back(std::move(node));
    }
    std::sort(nodes.begin(), nodes.end(),
              [](const DeviceNode& a, const DeviceNode& b) { return a.minor < b.minor; });
    return nodes;
}

std::string no_device_message() {
    if (!path_exists("/sys/module/spyre"))
        return "no Spyre device found: the spyre driver is not loaded (try: modprobe spyre)";
    if (!path_exists("/sys/class/accel"))
        return "no Spyre device found: the spyre driver is loaded but the kernel has no accel "
               "class (CONFIG_DRM_ACCEL)";
    return std::format(
        "no Spyre device found: the spyre driver is loaded but no card is bound to it (check "
        "`lspci -nn -d {:04x}:{:04x}` and dmesg)",
        SPYRE_PCI_VENDOR_ID, SPYRE_PCI_DEVICE_ID);
}

}  // namespace spyre
