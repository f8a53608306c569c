// SPDX-License-Identifier: GPL-2.0
/*
 * Reads a Spyre card's ID and VERSION registers through its BAR0 (sysfs resource0), one thread
 * per online CPU, until SIGTERM or the time limit, and checks every value: while another card's
 * BARs come and go (hot-unplug, memory decode off and on), a read routed to the wrong
 * MemoryRegion (QEMU's TCG resolving a stale TLB entry against a newer memory map) shows up as a
 * wrong value, if QEMU does not abort first.
 *
 *   mmio_hammer RESOURCE0 SECONDS
 *
 * Exit status 0 when every read was right (prints the number of reads), 1 on a wrong value,
 * 2 on a usage or set-up error.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "spyre_hw.h"

static volatile const uint32_t *regs;
static uint32_t version;
static atomic_bool stop;
static atomic_ulong reads, wrong;

static void *hammer(void *arg)
{
	unsigned long n = 0, bad = 0;
	unsigned int seed = (unsigned int)(intptr_t)arg + 1;
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET((int)(intptr_t)arg, &set);
	sched_setaffinity(0, sizeof(set), &set);
	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		uint32_t id, v;
		int spin;

		/*
		 * A random pause between reads: a vCPU that always waits in an MMIO access for the
		 * lock the memory map's commit holds would always have looked its entry up before.
		 */
		for (spin = rand_r(&seed) % 4096; spin; spin--)
			__asm__ volatile("" ::: "memory");
		id = regs[SPYRE_REG_ID / 4];
		v = regs[SPYRE_REG_VERSION / 4];

		if (id != SPYRE_ID_MAGIC || v != version) {
			if (bad++ < 5)
				fprintf(stderr, "mmio_hammer: cpu %d read ID 0x%08x VERSION 0x%08x\n",
					(int)(intptr_t)arg, id, v);
		}
		n++;
	}
	atomic_fetch_add(&reads, n);
	atomic_fetch_add(&wrong, bad);
	return NULL;
}

static void on_term(int sig)
{
	(void)sig;
	atomic_store(&stop, true);
}

int main(int argc, char **argv)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	pthread_t th[64];
	int fd, i, secs;

	if (argc != 3 || (secs = atoi(argv[2])) <= 0) {
		fprintf(stderr, "usage: mmio_hammer RESOURCE0 SECONDS\n");
		return 2;
	}
	fd = open(argv[1], O_RDONLY | O_SYNC);
	if (fd < 0) {
		fprintf(stderr, "mmio_hammer: %s: %s\n", argv[1], strerror(errno));
		return 2;
	}
	regs = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0);
	if (regs == MAP_FAILED) {
		fprintf(stderr, "mmio_hammer: mmap %s: %s\n", argv[1], strerror(errno));
		return 2;
	}
	if (regs[SPYRE_REG_ID / 4] != SPYRE_ID_MAGIC) {
		fprintf(stderr, "mmio_hammer: %s is not a Spyre BAR0\n", argv[1]);
		return 2;
	}
	version = regs[SPYRE_REG_VERSION / 4];
	signal(SIGTERM, on_term);
	signal(SIGALRM, on_term);
	alarm(secs);
	if (cpus > 64)
		cpus = 64;
	for (i = 0; i < cpus; i++)
		pthread_create(&th[i], NULL, hammer, (void *)(intptr_t)i);
	for (i = 0; i < cpus; i++)
		pthread_join(th[i], NULL);
	printf("mmio_hammer: %lu reads on %ld CPUs, %lu wrong\n", atomic_load(&reads), cpus,
	       atomic_load(&wrong));
	return atomic_load(&wrong) ? 1 : 0;
}
