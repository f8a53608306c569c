// SPDX-License-Identifier: GPL-2.0-only
/*
 * Helper of tests/guest/observability/observability.py.
 *
 *   spyre_obs query CARD
 *	QUERY device info, memory info and telemetry of card CARD (index among the spyre
 *	nodes), one key=value a line.
 *   spyre_obs client CARD LAUNCHES CORES COPIES COPY_BYTES
 *	Open the card, create BOs (a program, three vector BOs, a host and a device staging
 *	BO), run LAUNCHES one-LAUNCH jobs of a vector add on CORES cores and COPIES jobs of
 *	one host -> device copy of COPY_BYTES, each waited for. Prints what it allocated and
 *	the JOB_WAIT cycles per kind, then "ready", and serves stdin: "free" closes the
 *	device staging BO ("freed N"), "exit" or EOF ends. With LAUNCHES = COPIES = 0 and
 *	no BOs (CORES = 0): an idle fresh file.
 *
 * Every job must end DRM_SPYRE_JOB_OK; anything else exits 1 with a message.
 */
#include "spyre_test_lib.h"

static int die(const char *what, int err)
{
	fprintf(stderr, "spyre_obs: %s: %s\n", what, strerror(err < 0 ? -err : err));
	exit(1);
}

static int cmd_query(int card)
{
	struct drm_spyre_device_info di = { 0 };
	struct drm_spyre_mem_info mi = { 0 };
	struct drm_spyre_telemetry t = { 0 };
	int fd = open_card(card), ret;

	if (fd < 0)
		die("open card", errno ? errno : ENODEV);
	ret = query(fd, DRM_SPYRE_QUERY_DEVICE_INFO, &di, sizeof(di));
	if (ret)
		die("QUERY device info", ret);
	ret = query(fd, DRM_SPYRE_QUERY_MEM_INFO, &mi, sizeof(mi));
	if (ret)
		die("QUERY mem info", ret);
	ret = query(fd, DRM_SPYRE_QUERY_TELEMETRY, &t, sizeof(t));
	if (ret)
		die("QUERY telemetry", ret);
	printf("hw_version=%u.%u\n", di.hw_version >> 16, di.hw_version & 0xffff);
	printf("num_cores=%u\nclock_mhz=%u\n", di.num_cores, di.clock_mhz);
	printf("devmem_total=%llu\ndevmem_used=%llu\n", (unsigned long long)mi.devmem_total,
	       (unsigned long long)mi.devmem_used);
	printf("temp_mc=%u\npower_mw=%u\npower_cap_mw=%u\n", t.temp_mc, t.power_mw,
	       t.power_cap_mw);
	printf("resets=%u\nring_resets=%u\ncard_resets=%u\n", t.resets, t.ring_resets,
	       t.card_resets);
	printf("jobs_timed_out=%llu\nstate=%u\n", (unsigned long long)t.jobs_timed_out, t.state);
	printf("launches=%llu\nengine_cycles=%llu\n", (unsigned long long)t.launches,
	       (unsigned long long)t.engine_cycles);
	close(fd);
	return 0;
}

static uint32_t new_bo(int fd, uint64_t size, uint32_t flags, uint64_t *total)
{
	struct drm_spyre_bo_info info;
	uint32_t h;
	int ret = bo_create(fd, size, flags, &h);

	if (ret)
		die("BO_CREATE", ret);
	ret = bo_info(fd, h, &info);
	if (ret)
		die("BO_INFO", ret);
	if (info.size != size) {
		fprintf(stderr, "spyre_obs: BO of %llu bytes has size %llu\n",
			(unsigned long long)size, (unsigned long long)info.size);
		exit(1);
	}
	*total += size;
	return h;
}

static uint64_t run_job(int fd, struct drm_spyre_cmd *c)
{
	struct drm_spyre_job_wait w;
	uint64_t job;
	int ret;

	ret = submit_cmds(fd, c, 1, &job);
	if (ret)
		die("SUBMIT", ret);
	ret = job_wait(fd, job, now_ns() + 120 * SEC_NS, &w);
	if (ret)
		die("JOB_WAIT", ret);
	if (w.status != DRM_SPYRE_JOB_OK) {
		fprintf(stderr, "spyre_obs: job %llu status %u hw_status %u detail %u\n",
			(unsigned long long)job, w.status, w.hw_status, w.hw_detail);
		exit(1);
	}
	return w.cycles;
}

static int cmd_client(int card, unsigned int launches, unsigned int cores, unsigned int copies,
		      uint64_t copy_bytes)
{
	const uint64_t page = 4096, chunk = 512;
	uint64_t dev_bytes = 0, host_bytes = 0, compute = 0, dma = 0, vec;
	uint32_t prog, va, vb, vout, hstage = 0, dstage = 0, handles[3];
	struct drm_spyre_launch l = { 0 };
	struct drm_spyre_cmd c;
	struct prog p;
	char line[64];
	unsigned int i;
	size_t plen;
	int fd = open_card(card), ret;

	if (fd < 0)
		die("open card", errno ? errno : ENODEV);
	if (cores) {
		plen = build_vadd(&p);
		ret = prog_bo(fd, p.img, plen, 0, 2 * page, &prog);
		if (ret)
			die("program BO", ret);
		dev_bytes += 2 * page;
		vec = (cores * chunk + page - 1) / page * page;
		va = new_bo(fd, vec, DRM_SPYRE_BO_DEVICE, &dev_bytes);
		vb = new_bo(fd, vec, DRM_SPYRE_BO_DEVICE, &dev_bytes);
		vout = new_bo(fd, vec, DRM_SPYRE_BO_DEVICE, &dev_bytes);
		hstage = new_bo(fd, copy_bytes, DRM_SPYRE_BO_HOST, &host_bytes);
		dstage = new_bo(fd, copy_bytes, DRM_SPYRE_BO_DEVICE, &dev_bytes);

		handles[0] = va;
		handles[1] = vb;
		handles[2] = vout;
		l.num_cores = cores;
		l.num_args = 4;
		l.args[0] = dev_addr(fd, va);
		l.args[1] = dev_addr(fd, vb);
		l.args[2] = dev_addr(fd, vout);
		l.args[3] = chunk;
		l.bo_handles = (uintptr_t)handles;
		l.bo_count = 3;
		for (i = 0; i < launches; i++) {
			c = launch_cmd(prog, 0, plen, &l);
			compute += run_job(fd, &c);
		}
		for (i = 0; i < copies; i++) {
			c = copy_cmd(hstage, 0, dstage, 0, copy_bytes);
			dma += run_job(fd, &c);
		}
	}
	printf("pid=%d\nfd=%d\n", getpid(), fd);
	printf("device_bytes=%llu\nhost_bytes=%llu\n", (unsigned long long)dev_bytes,
	       (unsigned long long)host_bytes);
	printf("cycles_compute=%llu\ncycles_dma=%llu\n", (unsigned long long)compute,
	       (unsigned long long)dma);
	printf("staging_bytes=%llu\nready\n", (unsigned long long)(cores ? copy_bytes : 0));
	fflush(stdout);

	while (fgets(line, sizeof(line), stdin)) {
		if (!strncmp(line, "free", 4) && dstage) {
			ret = bo_close(fd, dstage);
			if (ret)
				die("GEM_CLOSE", ret);
			dstage = 0;
			printf("freed %llu\n", (unsigned long long)copy_bytes);
			fflush(stdout);
		} else if (!strncmp(line, "exit", 4)) {
			break;
		}
	}
	close(fd);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "query"))
		return cmd_query(atoi(argv[2]));
	if (argc == 7 && !strcmp(argv[1], "client"))
		return cmd_client(atoi(argv[2]), strtoul(argv[3], NULL, 0),
				  strtoul(argv[4], NULL, 0), strtoul(argv[5], NULL, 0),
				  strtoull(argv[6], NULL, 0));
	fprintf(stderr, "usage: spyre_obs query CARD | client CARD LAUNCHES CORES COPIES BYTES\n");
	return 2;
}
