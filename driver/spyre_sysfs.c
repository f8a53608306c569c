// SPDX-License-Identifier: GPL-2.0-only
/*
 * Spyre accelerator driver: observability.
 *
 * sysfs attributes of the PCI device (Documentation/ABI/testing/sysfs-driver-spyre), created
 * by the driver core after probe and removed before remove(); a hwmon device with the card's
 * temperature and power (devm, gone right after remove()); and the DRM fdinfo of every open
 * file (Documentation/gpu/drm-usage-stats.rst). Values come from the card's registers or
 * the driver's own counters; register reads after an unplug fail with -ENODEV.
 *
 * Copyright (C) 2025 The Spyre open stack authors
 */
#include <linux/bitfield.h>
#include <linux/hwmon.h>
#include <linux/math64.h>
#include <linux/pci.h>
#include <linux/sysfs.h>

#include <drm/drm_drv.h>
#include <drm/drm_file.h>
#include <drm/drm_gem.h>
#include <drm/drm_print.h>

#include "spyre_drv.h"

static const char * const spyre_engine_names[SPYRE_ENGINE_COUNT] = {
	[SPYRE_ENGINE_COMPUTE] = "compute",
	[SPYRE_ENGINE_DMA] = "dma",
};

/* Modeled cycles of the card's core clock in ns. */
static u64 spyre_cycles_to_ns(struct spyre_device *sdev, u64 cycles)
{
	return mul_u64_u32_div(cycles, 1000, sdev->clock_mhz);
}

/* ---- sysfs ---- */

static struct spyre_device *spyre_sysfs_dev(struct device *dev)
{
	return pci_get_drvdata(to_pci_dev(dev));
}

static ssize_t state_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	struct spyre_device *sdev = spyre_sysfs_dev(dev);
	const char *state = "ready";
	u32 status;
	int idx;

	if (!drm_dev_enter(&sdev->drm, &idx))
		return -ENODEV;
	status = spyre_read(sdev, SPYRE_REG_STATUS);
	drm_dev_exit(idx);
	if (READ_ONCE(sdev->wedged))
		state = "wedged";
	else if (READ_ONCE(sdev->recovering) || READ_ONCE(sdev->in_pci_reset) ||
		 (status & SPYRE_STATUS_RESETTING) || !(status & SPYRE_STATUS_READY))
		state = "resetting";
	return sysfs_emit(buf, "%s\n", state);
}
static DEVICE_ATTR_RO(state);

static ssize_t hw_version_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	struct spyre_device *sdev = spyre_sysfs_dev(dev);

	return sysfs_emit(buf, "%u.%u\n", sdev->hw_version >> 16, sdev->hw_version & 0xffff);
}
static DEVICE_ATTR_RO(hw_version);

static ssize_t num_cores_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "%u\n", spyre_sysfs_dev(dev)->num_cores);
}
static DEVICE_ATTR_RO(num_cores);

static ssize_t mem_total_bytes_show(struct device *dev, struct device_attribute *attr,
				    char *buf)
{
	return sysfs_emit(buf, "%llu\n", spyre_sysfs_dev(dev)->devmem_size);
}
static DEVICE_ATTR_RO(mem_total_bytes);

static ssize_t mem_used_bytes_show(struct device *dev, struct device_attribute *attr,
				   char *buf)
{
	return sysfs_emit(buf, "%llu\n", spyre_devmem_used(spyre_sysfs_dev(dev)));
}
static DEVICE_ATTR_RO(mem_used_bytes);

/* Busy time of the compute engine: the card's TELE_ENG_CYCLES in ns of its core clock. */
static ssize_t busy_time_ns_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	struct spyre_device *sdev = spyre_sysfs_dev(dev);
	u64 cycles;
	int idx;

	if (!drm_dev_enter(&sdev->drm, &idx))
		return -ENODEV;
	cycles = spyre_read64(sdev, SPYRE_REG_TELE_ENG_CYCLES_LO);
	drm_dev_exit(idx);
	return sysfs_emit(buf, "%llu\n", spyre_cycles_to_ns(sdev, cycles));
}
static DEVICE_ATTR_RO(busy_time_ns);

/*
 * Busy time of every core: its TELE_CORE ACTIVE counter (cycles from each launch's start to
 * the core's halt) in ns of the core clock, one value per core, separated by spaces.
 */
static ssize_t core_busy_time_ns_show(struct device *dev, struct device_attribute *attr,
				      char *buf)
{
	struct spyre_device *sdev = spyre_sysfs_dev(dev);
	unsigned int n = min_t(u32, sdev->num_cores, SPYRE_LAUNCH_MAX_CORES), i;
	int idx, len = 0;
	u64 cycles;

	if (!drm_dev_enter(&sdev->drm, &idx))
		return -ENODEV;
	for (i = 0; i < n; i++) {
		cycles = spyre_read64(sdev, SPYRE_TELE_CORE_REG(i, SPYRE_TELE_CORE_ACTIVE_LO));
		len += sysfs_emit_at(buf, len, "%s%llu", i ? " " : "",
				     spyre_cycles_to_ns(sdev, cycles));
	}
	drm_dev_exit(idx);
	len += sysfs_emit_at(buf, len, "\n");
	return len;
}
static DEVICE_ATTR_RO(core_busy_time_ns);

/* The current link as the PCIe capability's Link Status register reports it. */
static int spyre_link_status(struct device *dev, u16 *lnksta)
{
	int ret = pcie_capability_read_word(to_pci_dev(dev), PCI_EXP_LNKSTA, lnksta);

	return ret ? pcibios_err_to_errno(ret) : 0;
}

static ssize_t pcie_link_speed_show(struct device *dev, struct device_attribute *attr,
				    char *buf)
{
	static const char * const speeds[] = {
		[1] = "2.5", [2] = "5.0", [3] = "8.0", [4] = "16.0", [5] = "32.0", [6] = "64.0",
	};
	unsigned int cls;
	u16 lnksta;
	int ret;

	ret = spyre_link_status(dev, &lnksta);
	if (ret)
		return ret;
	cls = FIELD_GET(PCI_EXP_LNKSTA_CLS, lnksta);
	if (cls >= ARRAY_SIZE(speeds) || !speeds[cls])
		return sysfs_emit(buf, "unknown\n");
	return sysfs_emit(buf, "%s GT/s\n", speeds[cls]);
}
static DEVICE_ATTR_RO(pcie_link_speed);

static ssize_t pcie_link_width_show(struct device *dev, struct device_attribute *attr,
				    char *buf)
{
	u16 lnksta;
	int ret;

	ret = spyre_link_status(dev, &lnksta);
	if (ret)
		return ret;
	return sysfs_emit(buf, "%u\n", (unsigned int)FIELD_GET(PCI_EXP_LNKSTA_NLW, lnksta));
}
static DEVICE_ATTR_RO(pcie_link_width);

/*
 * The accel minors of the other cards this one shares DEVICE BOs with (both CAP_P2P), in
 * probe order, separated by spaces.
 */
static ssize_t p2p_peers_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	struct spyre_device *sdev = spyre_sysfs_dev(dev), *peer;
	ssize_t len = 0;

	mutex_lock(&spyre_cards_lock);
	list_for_each_entry(peer, &spyre_cards, card_node)
		if (peer != sdev && (peer->caps & SPYRE_CAP_P2P))
			len += sysfs_emit_at(buf, len, "%s%d", len ? " " : "",
					     peer->drm.accel->index);
	mutex_unlock(&spyre_cards_lock);
	len += sysfs_emit_at(buf, len, "\n");
	return len;
}
static DEVICE_ATTR_RO(p2p_peers);

/* Every other bound card as MINOR:DISTANCE (drm_spyre_peer.distance: PCI bridges between). */
static ssize_t peer_distances_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	struct spyre_device *sdev = spyre_sysfs_dev(dev), *peer;
	ssize_t len = 0;
	bool shared;

	mutex_lock(&spyre_cards_lock);
	list_for_each_entry(peer, &spyre_cards, card_node)
		if (peer != sdev)
			len += sysfs_emit_at(buf, len, "%s%d:%u", len ? " " : "",
					     peer->drm.accel->index,
					     spyre_peer_distance(sdev, peer, &shared));
	mutex_unlock(&spyre_cards_lock);
	len += sysfs_emit_at(buf, len, "\n");
	return len;
}
static DEVICE_ATTR_RO(peer_distances);

static struct attribute *spyre_attrs[] = {
	&dev_attr_state.attr,
	&dev_attr_hw_version.attr,
	&dev_attr_num_cores.attr,
	&dev_attr_mem_total_bytes.attr,
	&dev_attr_mem_used_bytes.attr,
	&dev_attr_busy_time_ns.attr,
	&dev_attr_core_busy_time_ns.attr,
	&dev_attr_pcie_link_speed.attr,
	&dev_attr_pcie_link_width.attr,
	&dev_attr_p2p_peers.attr,
	&dev_attr_peer_distances.attr,
	NULL
};

static umode_t spyre_attr_visible(struct kobject *kobj, struct attribute *attr, int n)
{
	struct device *dev = kobj_to_dev(kobj);
	struct spyre_device *sdev = spyre_sysfs_dev(dev);

	if ((attr == &dev_attr_busy_time_ns.attr || attr == &dev_attr_core_busy_time_ns.attr) &&
	    (!(sdev->caps & SPYRE_CAP_TELEMETRY) || !(sdev->caps & SPYRE_CAP_LAUNCH)))
		return 0;
	if ((attr == &dev_attr_pcie_link_speed.attr || attr == &dev_attr_pcie_link_width.attr) &&
	    !pci_is_pcie(to_pci_dev(dev)))
		return 0;
	if (attr == &dev_attr_p2p_peers.attr && !(sdev->caps & SPYRE_CAP_P2P))
		return 0;
	return attr->mode;
}

static const struct attribute_group spyre_attr_group = {
	.attrs = spyre_attrs,
	.is_visible = spyre_attr_visible,
};

/* resets/: recoveries by kind (driver counters) and the card's own reset counter. */
static ssize_t ring_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "%d\n", atomic_read(&spyre_sysfs_dev(dev)->ring_resets));
}
static DEVICE_ATTR_RO(ring);

static ssize_t card_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "%d\n", atomic_read(&spyre_sysfs_dev(dev)->card_resets));
}
static DEVICE_ATTR_RO(card);

static ssize_t device_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	struct spyre_device *sdev = spyre_sysfs_dev(dev);
	u32 resets;
	int idx;

	if (!drm_dev_enter(&sdev->drm, &idx))
		return -ENODEV;
	resets = spyre_read(sdev, SPYRE_REG_TELE_RESETS);
	drm_dev_exit(idx);
	return sysfs_emit(buf, "%u\n", resets);
}
static DEVICE_ATTR_RO(device);

static ssize_t jobs_timed_out_show(struct device *dev, struct device_attribute *attr,
				   char *buf)
{
	return sysfs_emit(buf, "%lld\n", atomic64_read(&spyre_sysfs_dev(dev)->jobs_timed_out));
}
static DEVICE_ATTR_RO(jobs_timed_out);

static struct attribute *spyre_reset_attrs[] = {
	&dev_attr_ring.attr,
	&dev_attr_card.attr,
	&dev_attr_device.attr,
	&dev_attr_jobs_timed_out.attr,
	NULL
};

static umode_t spyre_reset_attr_visible(struct kobject *kobj, struct attribute *attr, int n)
{
	struct spyre_device *sdev = spyre_sysfs_dev(kobj_to_dev(kobj));

	if (attr == &dev_attr_device.attr && !(sdev->caps & SPYRE_CAP_TELEMETRY))
		return 0;
	return attr->mode;
}

static const struct attribute_group spyre_reset_group = {
	.name = "resets",
	.attrs = spyre_reset_attrs,
	.is_visible = spyre_reset_attr_visible,
};

const struct attribute_group *spyre_dev_groups[] = {
	&spyre_attr_group,
	&spyre_reset_group,
	NULL
};

/* ---- hwmon ---- */

#if IS_REACHABLE(CONFIG_HWMON)

static umode_t spyre_hwmon_is_visible(const void *data, enum hwmon_sensor_types type,
				      u32 attr, int channel)
{
	switch (type) {
	case hwmon_temp:
		return attr == hwmon_temp_input ? 0444 : 0;
	case hwmon_power:
		return attr == hwmon_power_input || attr == hwmon_power_cap ? 0444 : 0;
	default:
		return 0;
	}
}

static int spyre_hwmon_read(struct device *dev, enum hwmon_sensor_types type, u32 attr,
			    int channel, long *val)
{
	struct spyre_device *sdev = dev_get_drvdata(dev);
	int idx, ret = 0;

	if (!drm_dev_enter(&sdev->drm, &idx))
		return -ENODEV;
	if (type == hwmon_temp && attr == hwmon_temp_input)
		*val = (s32)spyre_read(sdev, SPYRE_REG_TELE_TEMP_MC);
	else if (type == hwmon_power && attr == hwmon_power_input)
		*val = (long)spyre_read(sdev, SPYRE_REG_TELE_POWER_MW) * 1000;
	else if (type == hwmon_power && attr == hwmon_power_cap)
		*val = (long)spyre_read(sdev, SPYRE_REG_TELE_POWER_CAP_MW) * 1000;
	else
		ret = -EOPNOTSUPP;
	drm_dev_exit(idx);
	return ret;
}

static const struct hwmon_channel_info * const spyre_hwmon_info[] = {
	HWMON_CHANNEL_INFO(temp, HWMON_T_INPUT),
	HWMON_CHANNEL_INFO(power, HWMON_P_INPUT | HWMON_P_CAP),
	NULL
};

static const struct hwmon_ops spyre_hwmon_ops = {
	.is_visible = spyre_hwmon_is_visible,
	.read = spyre_hwmon_read,
};

static const struct hwmon_chip_info spyre_hwmon_chip = {
	.ops = &spyre_hwmon_ops,
	.info = spyre_hwmon_info,
};

/*
 * Registered on the PCI device with devres, after everything else of probe: it goes right
 * after remove(), before the BAR mappings. Not fatal if it fails.
 */
void spyre_hwmon_init(struct spyre_device *sdev)
{
	struct device *hwmon;

	if (!(sdev->caps & SPYRE_CAP_TELEMETRY))
		return;
	hwmon = devm_hwmon_device_register_with_info(&sdev->pdev->dev, SPYRE_DRIVER_NAME, sdev,
						     &spyre_hwmon_chip, NULL);
	if (IS_ERR(hwmon))
		drm_warn(&sdev->drm, "no hwmon device: %pe\n", hwmon);
}
#else
void spyre_hwmon_init(struct spyre_device *sdev)
{
}
#endif

/* ---- fdinfo ---- */

/*
 * Engines: the modeled cycles of the file's completed commands (completion entries), per
 * engine; busy ns at the core clock. Memory: the file's BOs (its handles), card memory as
 * region "device", pinned host memory as "memory". Every BO is resident from creation.
 * The host memory of the file's MMU page tables as region "pagetables".
 * Reads only the file's own state, so it works after the card is gone too.
 */
void spyre_show_fdinfo(struct drm_printer *p, struct drm_file *file)
{
	struct spyre_file *sf = file->driver_priv;
	struct spyre_device *sdev = sf->sdev;
	struct drm_memory_stats dev_st = { 0 }, host_st = { 0 }, *st;
	struct drm_gem_object *obj;
	unsigned int i;
	u64 cycles;
	int id;

	for (i = 0; i < SPYRE_ENGINE_COUNT; i++) {
		cycles = atomic64_read(&sf->engine_cycles[i]);
		drm_printf(p, "drm-engine-%s:\t%llu ns\n", spyre_engine_names[i],
			   spyre_cycles_to_ns(sdev, cycles));
		drm_printf(p, "drm-engine-capacity-%s:\t1\n", spyre_engine_names[i]);
		drm_printf(p, "drm-cycles-%s:\t%llu\n", spyre_engine_names[i], cycles);
		drm_printf(p, "drm-maxfreq-%s:\t%u MHz\n", spyre_engine_names[i],
			   sdev->clock_mhz);
	}

	spin_lock(&file->table_lock);
	idr_for_each_entry(&file->object_idr, obj, id) {
		/* A peer's BO is neither this card's memory nor host memory. */
		if (to_spyre_bo(obj)->flags == DRM_SPYRE_BO_PEER)
			continue;
		st = to_spyre_bo(obj)->flags == DRM_SPYRE_BO_HOST ? &host_st : &dev_st;
		if (drm_gem_object_is_shared_for_memory_stats(obj))
			st->shared += obj->size;
		else
			st->private += obj->size;
		st->resident += obj->size;
	}
	spin_unlock(&file->table_lock);
	drm_print_memory_stats(p, &dev_st, DRM_GEM_OBJECT_RESIDENT, "device");
	drm_print_memory_stats(p, &host_st, DRM_GEM_OBJECT_RESIDENT, "memory");
	if (sf->vm) {
		struct drm_memory_stats pt_st = { 0 };

		/* Host memory of the file's MMU tables (vm->lock not needed for one u64). */
		pt_st.private = READ_ONCE(sf->vm->pt_bytes);
		pt_st.resident = pt_st.private;
		drm_print_memory_stats(p, &pt_st, DRM_GEM_OBJECT_RESIDENT, "pagetables");
		/* The card context id the file's jobs run with now; 0: none bound (yet). */
		drm_printf(p, "spyre-mmu-context:\t%u\n", READ_ONCE(sf->vm->ctx));
	}
}
