/* SPDX-License-Identifier: MIT */
/*
 * libspyre: the C API of the Spyre open stack.
 *
 * A stable C ABI over the spyre DRM accel driver (/dev/accel/accelN), or over in-process
 * simulated cards (SPYRE_BACKEND=sim). All objects are opaque
 * handles; every function returns a spyre_status and, on failure, stores a human-readable,
 * actionable message for the calling thread that spyre_last_error() returns.
 *
 * Reference: Documentation/libspyre.md.
 */
#ifndef SPYRE_SPYRE_H_
#define SPYRE_SPYRE_H_

#include <stddef.h>
#include <stdint.h>

#if defined(__cplusplus)
extern "C" {
#endif

#if defined(SPYRE_BUILDING_LIBRARY)
#define SPYRE_API __attribute__((visibility("default")))
#else
#define SPYRE_API
#endif

/* ---- Versions ---- */

/* Version of this API. Additions bump the minor number; incompatible changes bump the major
 * number (and the library's SONAME). */
#define SPYRE_API_VERSION_MAJOR 0
#define SPYRE_API_VERSION_MINOR 24
#define SPYRE_API_VERSION_PATCH 0
#define SPYRE_API_VERSION \
    ((SPYRE_API_VERSION_MAJOR << 16) | (SPYRE_API_VERSION_MINOR << 8) | SPYRE_API_VERSION_PATCH)

/* The SPYRE_API_VERSION the loaded library was built with. */
SPYRE_API uint32_t spyre_get_version(void);
/* The library version as text, e.g. "0.1.0". Static storage. */
SPYRE_API const char* spyre_get_version_string(void);

/* ---- Status and errors ---- */

typedef enum spyre_status {
    SPYRE_SUCCESS = 0,
    SPYRE_ERROR_INVALID_ARGUMENT = 1, /* a null handle, a bad size or offset, ... */
    SPYRE_ERROR_NO_DEVICE = 2,        /* no card, no driver, or device index out of range */
    SPYRE_ERROR_OUT_OF_MEMORY = 3,    /* device memory, host-pinned memory or host heap */
    SPYRE_ERROR_DEVICE_ERROR = 4,     /* the card reported a failed command (hw status in msg) */
    SPYRE_ERROR_TIMEOUT = 5,          /* a job did not finish in time */
    SPYRE_ERROR_IO = 6,               /* an unexpected system call failure */
    SPYRE_ERROR_NOT_SUPPORTED = 7,    /* the driver or card lacks a needed capability */
    SPYRE_ERROR_DEVICE_LOST = 8,      /* the card was removed or the driver unbound */
    SPYRE_ERROR_PERMISSION = 9,       /* no permission to open the accel node */
    SPYRE_ERROR_INTERNAL = 10,        /* a bug in libspyre */
    SPYRE_ERROR_PROGRAM = 11,         /* malformed program image, or the program faulted */
    SPYRE_ERROR_NOT_READY = 12,       /* spyre_stream_query/spyre_event_query: work pending */
    SPYRE_ERROR_BUSY = 13,            /* the driver's job queue stayed full */
} spyre_status;

/* Short constant description of a status, e.g. "out of memory". Never NULL. */
SPYRE_API const char* spyre_status_string(spyre_status status);

/*
 * Message describing the most recent failure of a libspyre call on the calling thread, e.g.
 * "spyre_malloc: out of device memory on spyre0: asked 3.0 GiB, 1.2 GiB free". Successful calls
 * do not clear it (like errno). "" if no call has failed on this thread. The pointer stays
 * valid until the next failing libspyre call on this thread.
 */
SPYRE_API const char* spyre_last_error(void);
/* Clears the calling thread's last-error message. */
SPYRE_API void spyre_clear_last_error(void);

/* ---- Devices ---- */

typedef struct spyre_device* spyre_device_t;
typedef struct spyre_buffer* spyre_buffer_t;
typedef struct spyre_program* spyre_program_t;

/*
 * Backends. The backend is chosen per process by the environment variable SPYRE_BACKEND:
 * "kernel" (default: the spyre driver, /dev/accel/accelN) or "sim" (in-process simulated
 * cards running the compute engine; SPYRE_SIM_DEVICES cards, default 1, of SPYRE_SIM_MEMORY
 * bytes each, default 1 GiB). Both implement this whole API.
 */
typedef enum spyre_backend {
    SPYRE_BACKEND_KERNEL = 0,
    SPYRE_BACKEND_SIM = 1,
} spyre_backend;

/* "kernel", "sim", or "unknown". Static storage. */
SPYRE_API const char* spyre_backend_string(spyre_backend backend);

/*
 * Number of Spyre cards bound to the spyre driver. With none, *count is 0 and the call returns
 * SPYRE_ERROR_NO_DEVICE with a message saying whether the driver is loaded.
 * Devices are numbered 0..count-1 in the order of their accel minor numbers.
 */
SPYRE_API spyre_status spyre_get_device_count(int* count);

/* Opens device `index`. Release with spyre_device_close(). All opens of one card in a process
 * share one context (one driver file), so buffers, programs, streams and events of the card
 * work with any of its handles. Thread-safe: a device may be used from several threads. */
SPYRE_API spyre_status spyre_device_open(int index, spyre_device_t* device);

/* Releases the caller's reference. Buffers still allocated on the device stay valid (they keep
 * the device alive) until they are freed. NULL is accepted and ignored. */
SPYRE_API spyre_status spyre_device_close(spyre_device_t device);

/* Capability bits of spyre_device_info.caps. */
#define SPYRE_DEVICE_CAP_DMA_COPY (1ull << 0)
#define SPYRE_DEVICE_CAP_HOST_BUFFER (1ull << 1)
#define SPYRE_DEVICE_CAP_TIMELINE (1ull << 2)
#define SPYRE_DEVICE_CAP_TELEMETRY (1ull << 3)
#define SPYRE_DEVICE_CAP_LAUNCH (1ull << 4) /* spyre_launch() */
/* One DMA descriptor per strided 2-D block (spyre_memcpy_3d); without it, one per row. */
#define SPYRE_DEVICE_CAP_COPY_2D (1ull << 6)
/* The process has a device address space of its own (card MMU): spyre_buffer_device_address
 * values are virtual addresses meaningful only to this process. */
#define SPYRE_DEVICE_CAP_VM (1ull << 7)
/* Peer-to-peer DMA (hw 1.6): this card's DMA engine reaches other cards' device memory
 * (spyre_memcpy_peer). */
#define SPYRE_DEVICE_CAP_P2P (1ull << 8)
/* The card reports when each job ran on its modeled clock (hw 1.7): events of two streams of
 * the card compare (spyre_event_elapsed) on the kernel backend. */
#define SPYRE_DEVICE_CAP_JOB_CLOCK (1ull << 9)
/* Device-side semaphores (hw 1.8 on the kernel backend; always on the simulator):
 * spyre_stream_write_value / spyre_stream_wait_value. */
#define SPYRE_DEVICE_CAP_SEMAPHORE (1ull << 10)

typedef struct spyre_device_info {
    int index;               /* index passed to spyre_device_open() */
    char name[32];           /* "spyre0" */
    char accel_path[64];     /* "/dev/accel/accel0" */
    char pci_address[32];    /* "0000:00:03.0" */
    char driver_name[32];    /* "spyre" */
    char driver_version[32]; /* "1.0.0" (major.minor.patchlevel) */
    char driver_date[32];    /* driver date string, may be empty */
    uint16_t pci_vendor;
    uint16_t pci_device;
    uint16_t pci_revision;
    uint16_t reserved0;
    uint32_t hw_version_major;
    uint32_t hw_version_minor;
    uint32_t num_cores;
    uint32_t num_rings;
    uint32_t lx_bytes;    /* scratchpad bytes per core */
    uint32_t stick_bytes; /* DDR <-> LX transfer unit */
    uint32_t clock_mhz;
    uint64_t devmem_total;     /* bytes of device memory */
    uint64_t max_buffer_bytes; /* largest single device buffer */
    uint64_t caps;             /* SPYRE_DEVICE_CAP_* */
    uint32_t backend;          /* spyre_backend */
    uint32_t reserved1;
    uint64_t reserved[7];
} spyre_device_info;

SPYRE_API spyre_status spyre_device_get_info(spyre_device_t device, spyre_device_info* info);

/* Device memory in bytes: *free = total - used by all processes. Either pointer may be NULL. */
SPYRE_API spyre_status spyre_mem_get_info(spyre_device_t device, uint64_t* free, uint64_t* total);

typedef struct spyre_mem_stats {
    uint64_t devmem_total;
    uint64_t devmem_used;         /* bytes in device buffers of all processes */
    uint64_t devmem_largest_free; /* largest buffer that can be allocated now */
    uint64_t host_buffer_bytes;   /* pinned host memory of all processes */
    uint64_t reserved[4];
} spyre_mem_stats;

SPYRE_API spyre_status spyre_device_get_mem_stats(spyre_device_t device, spyre_mem_stats* stats);

/* Counters and sensors of the card (mirrors the driver's telemetry query). */
typedef struct spyre_telemetry {
    uint64_t cmds_completed;
    uint64_t h2d_bytes;
    uint64_t d2h_bytes;
    uint64_t d2d_bytes;
    uint64_t jobs_submitted;
    uint64_t jobs_completed;
    uint64_t jobs_failed;
    uint32_t cmd_errors;
    uint32_t resets;
    uint32_t temp_mc;      /* milli-Celsius */
    uint32_t power_mw;     /* milliwatts */
    uint32_t power_cap_mw; /* milliwatts */
    uint32_t reserved0;
    /* Compute engine since power-on (zero without SPYRE_DEVICE_CAP_LAUNCH). */
    uint64_t launches;      /* programs run, successful or not */
    uint64_t launch_errors; /* programs that stopped with a fault */
    uint64_t engine_cycles; /* modeled cycles of all launches */
    uint64_t engine_instructions;
    uint64_t engine_macs;
    uint64_t engine_ddr_read_bytes;
    uint64_t engine_ddr_write_bytes;
    uint64_t engine_ring_bytes;
    /* Peer-to-peer (hw 1.6): bytes this card's copies read from / wrote into other cards'
     * memory; a subset of h2d_bytes / d2h_bytes. The card whose memory is the target counts
     * nothing. Zero without SPYRE_DEVICE_CAP_P2P or on a driver that does not report them. */
    uint64_t p2p_read_bytes;
    uint64_t p2p_write_bytes;
    uint64_t reserved[2];
} spyre_telemetry;

/* SPYRE_ERROR_NOT_SUPPORTED if the card has no telemetry. */
SPYRE_API spyre_status spyre_device_get_telemetry(spyre_device_t device, spyre_telemetry* t);

/* Waits until all work this process queued on the device (every stream) has finished; returns
 * the first error of asynchronous work not yet reported by a stream synchronize. */
SPYRE_API spyre_status spyre_device_synchronize(spyre_device_t device);

/* Counters of libspyre's runtime on one card (this process). */
typedef struct spyre_runtime_stats {
    uint64_t jobs_submitted;           /* jobs libspyre submitted (kernel backend: SUBMITs; the
                                        * simulator: work items queued on its streams) */
    uint64_t busy_retries;             /* submissions retried after the driver's queue was full */
    uint64_t backpressure_waits;       /* waits for older work before queueing more */
    uint64_t program_cache_hits;       /* spyre_program_load calls that reused a loaded image */
    uint64_t program_cache_misses;     /* ... that copied a new image to the device */
    uint64_t suballoc_slabs;           /* slabs held by the sub-allocator */
    uint64_t suballoc_slab_bytes;      /* their bytes */
    uint64_t suballoc_used_bytes;      /* bytes of live sub-allocated buffers (block-rounded) */
    uint64_t suballoc_buffers;         /* live sub-allocated buffers */
    uint64_t suballoc_max_bytes;       /* largest request served from slabs (0: off) */
    uint64_t pinned_programs;          /* op library programs loaded on the card (at most 1024) */
    uint64_t pinned_program_evictions; /* ... unloaded to stay within that bound */
    uint64_t reserved[4];
} spyre_runtime_stats;

SPYRE_API spyre_status spyre_device_get_runtime_stats(spyre_device_t device,
                                                      spyre_runtime_stats* stats);

/* ---- Device memory ---- */

/* Allocates `size` (> 0) bytes of device memory. Contents are undefined. */
SPYRE_API spyre_status spyre_malloc(spyre_device_t device, uint64_t size, spyre_buffer_t* buffer);

/* Frees a buffer (and its CPU mapping). NULL is accepted and ignored. The caller must not use
 * the buffer, or a pointer from spyre_buffer_map(), afterwards. */
SPYRE_API spyre_status spyre_free(spyre_buffer_t buffer);

/* Size requested at allocation. */
SPYRE_API spyre_status spyre_buffer_size(spyre_buffer_t buffer, uint64_t* size);

/* Device address of the buffer: what programs get as arguments (spyre_launch_params.args). */
SPYRE_API spyre_status spyre_buffer_device_address(spyre_buffer_t buffer, uint64_t* addr);

/* The device the buffer lives on. No new reference: do not close it. */
SPYRE_API spyre_status spyre_buffer_get_device(spyre_buffer_t buffer, spyre_device_t* device);

/* The live buffer of `device`'s card that contains device address `addr`, and the offset of
 * `addr` in it (*offset may be NULL). SPYRE_ERROR_INVALID_ARGUMENT if no live buffer does. */
SPYRE_API spyre_status spyre_buffer_from_address(spyre_device_t device, uint64_t addr,
                                                 spyre_buffer_t* buffer, uint64_t* offset);

/* A CPU pointer to the buffer's memory through the card's BAR (uncached, slow for reads;
 * use the memcpy functions for bulk data). Valid until spyre_free(). Mapped once, on demand. */
SPYRE_API spyre_status spyre_buffer_map(spyre_buffer_t buffer, void** ptr);

/* ---- Pinned host memory ---- */

/* Allocates `size` (> 0) bytes of host memory the card's DMA engine reaches directly: copies
 * from or to it skip the staging buffers. Page-aligned. Free with spyre_host_free() on the same
 * device. Usable as ordinary memory by the CPU. */
SPYRE_API spyre_status spyre_host_alloc(spyre_device_t device, uint64_t size, void** ptr);

/* Frees memory from spyre_host_alloc(device, ...). NULL is accepted and ignored. */
SPYRE_API spyre_status spyre_host_free(spyre_device_t device, void* ptr);

/* ---- Copies (synchronous: they return once the data has arrived) ---- */

/* Host memory -> device buffer. `src` may be any host memory; a range inside a
 * spyre_host_alloc() region of the buffer's device is copied without staging. size 0 is a
 * no-op. */
SPYRE_API spyre_status spyre_memcpy_htod(spyre_buffer_t dst, uint64_t dst_offset, const void* src,
                                         uint64_t size);

/* Device buffer -> host memory. */
SPYRE_API spyre_status spyre_memcpy_dtoh(void* dst, spyre_buffer_t src, uint64_t src_offset,
                                         uint64_t size);

/* Device buffer -> device buffer on the same device. The ranges may be in the same buffer but
 * must not overlap. */
SPYRE_API spyre_status spyre_memcpy_dtod(spyre_buffer_t dst, uint64_t dst_offset,
                                         spyre_buffer_t src, uint64_t src_offset, uint64_t size);

/* ---- Programs (Documentation/isa.md) ---- */

/*
 * Loads a program image (header + instructions, Documentation/isa.md "Program format") onto the
 * device: checks the header (magic, version, header size, instruction count, image size, flags,
 * reserved fields) and copies the image into a device buffer. Malformed images give
 * SPYRE_ERROR_PROGRAM with the reason. The caller's image may be freed afterwards.
 */
SPYRE_API spyre_status spyre_program_load(spyre_device_t device, const void* image, size_t size,
                                          spyre_program_t* program);

/* Frees the program's device buffer. NULL is accepted and ignored. */
SPYRE_API spyre_status spyre_program_free(spyre_program_t program);

/* ---- Streams and events (Documentation/libspyre.md "Streams") ---- */

/* An ordered queue of work on one card. Work on one stream runs in order; work on different
 * streams may run concurrently unless ordered with events. NULL means the default stream of
 * the card the operation is on (created on first use; an ordinary stream on ring 0, not
 * synchronised with the other streams). */
typedef struct spyre_stream* spyre_stream_t;
/* A point in a stream's work (spyre_event_record). */
typedef struct spyre_event* spyre_event_t;

/* Stream priorities. On the kernel backend a HIGH stream has a ring of its own and submits
 * at the driver's high priority when the process may (CAP_SYS_NICE; else at normal
 * priority, still on its own ring); a LOW stream's jobs yield to every other queued job of
 * its ring. The simulator runs all streams alike. */
#define SPYRE_STREAM_PRIORITY_NORMAL 0
#define SPYRE_STREAM_PRIORITY_HIGH (-1)
#define SPYRE_STREAM_PRIORITY_LOW 1

SPYRE_API spyre_status spyre_stream_create(spyre_device_t device, int priority,
                                           spyre_stream_t* stream);
/* Waits for the stream's work, then releases it. Returns that work's first error, if any. */
SPYRE_API spyre_status spyre_stream_destroy(spyre_stream_t stream);
/* Waits for all work queued on the stream. Returns the first error of its asynchronous work
 * since the last synchronize (the error is then cleared; later work was still run). */
SPYRE_API spyre_status spyre_stream_synchronize(spyre_stream_t stream);
/* SPYRE_SUCCESS if all its work has finished, SPYRE_ERROR_NOT_READY if not, or an error like
 * spyre_stream_synchronize. Does not block. */
SPYRE_API spyre_status spyre_stream_query(spyre_stream_t stream);
/* Later work on `stream` starts only after the work `event` covers has finished (on one card
 * a device-side dependency: no host round trip). An event never recorded is complete. */
SPYRE_API spyre_status spyre_stream_wait_event(spyre_stream_t stream, spyre_event_t event);
/* Calls fn(user) on a libspyre thread once all earlier work of the stream has finished; later
 * work of the stream waits for fn to return. fn must not call spyre_stream_synchronize on
 * this stream. */
SPYRE_API spyre_status spyre_launch_host_func(spyre_stream_t stream, void (*fn)(void*), void* user);
/* The stream's card and priority. */
SPYRE_API spyre_status spyre_stream_get_info(spyre_stream_t stream, spyre_device_t* device,
                                             int* priority);

/* ---- Device-side semaphores (SPYRE_DEVICE_CAP_SEMAPHORE; Documentation/libspyre.md
 * "Semaphores") ----
 * A semaphore is SPYRE_SEMAPHORE_BYTES bytes at a 16-byte aligned offset of a device buffer:
 * a uint64_t value, then a uint64_t the card writes beside it (the modeled cycle of the write,
 * which carries the writer's modeled time to the waiter, also across cards). Zero it (e.g.
 * spyre_memset) before first use. Neither call blocks the host: the card does the work in
 * stream order, so a stream can be made to wait for work that another stream, another card
 * or another process has not even queued yet. A stream capture refuses both; a submission
 * batch (spyre_stream_begin_batch) holds both in order with its other work. */
#define SPYRE_SEMAPHORE_BYTES 16
#define SPYRE_SEMAPHORE_WAIT_MAX_US 10000000u

/* Once the stream's earlier work has finished, stores `value` in the semaphore. `sem` may be a
 * buffer of the stream's card or, with peer access enabled from it (spyre_memcpy_peer), of a
 * peer card: the stream's card writes it over the peer link after its earlier work's data. */
SPYRE_API spyre_status spyre_stream_write_value(spyre_stream_t stream, spyre_buffer_t sem,
                                                uint64_t offset, uint64_t value);
/* Later work of the stream starts once the semaphore's value is at least `value` (unsigned
 * comparison). The wait holds the stream (on the kernel backend its ring) for at most
 * `timeout_us` (<= SPYRE_SEMAPHORE_WAIT_MAX_US) microseconds; then the stream fails with
 * SPYRE_ERROR_TIMEOUT, reported like any asynchronous error. `sem` must be on the stream's
 * card. */
SPYRE_API spyre_status spyre_stream_wait_value(spyre_stream_t stream, spyre_buffer_t sem,
                                               uint64_t offset, uint64_t value,
                                               uint32_t timeout_us);

/* ---- Stream capture and graphs ----
 * Between spyre_stream_begin_capture and spyre_stream_end_capture, the work queued on the
 * stream is recorded into a graph instead of run: launches (the op library's included),
 * device-to-device copies (spyre_memcpy_dtod_async, 3-D copies between buffers), fills and
 * memsets, event records, and graphs launched on it. Work that cannot be replayed fails with
 * SPYRE_ERROR_NOT_SUPPORTED and invalidates the capture (end_capture then returns that
 * error): copies from or to host memory, synchronize and query of the stream, host
 * functions, waits for events not recorded during the capture, semaphore writes and waits.
 * Arguments are checked when the work is captured. spyre_graph_launch queues the graph's work in
 * its order on a stream; on the kernel backend it is one SUBMIT (one job) per DRM_SPYRE_MAX_CMDS
 * commands and 1024 launches, on the simulator one work item. The graph keeps the programs and
 * buffers it uses alive until spyre_graph_destroy (and until its queued replays have finished).
 * Events recorded during the capture are recorded after all of the graph's work at each replay. */
typedef struct spyre_graph* spyre_graph_t;
SPYRE_API spyre_status spyre_stream_begin_capture(spyre_stream_t stream);
/* Ends the capture (also when it failed): *graph is the captured graph, or NULL and the error
 * that invalidated the capture. */
SPYRE_API spyre_status spyre_stream_end_capture(spyre_stream_t stream, spyre_graph_t* graph);
/* *capturing = 1 while the stream captures, else 0. */
SPYRE_API spyre_status spyre_stream_is_capturing(spyre_stream_t stream, int* capturing);
/* Queues the graph's work on `stream` (NULL: the default stream of the graph's card), which
 * must be of the graph's card; on a capturing stream the graph's work joins that capture. */
SPYRE_API spyre_status spyre_graph_launch(spyre_graph_t graph, spyre_stream_t stream);
typedef struct spyre_graph_info {
    uint64_t operations; /* captured launches, copies and fills */
    uint64_t launches;
    uint64_t random_launches; /* launches with a random stream (API 0.24) */
    uint64_t random_offsets;  /* their captured offsets' span: largest - smallest + 1, or 0 */
    uint64_t reserved[4];
} spyre_graph_info;
SPYRE_API spyre_status spyre_graph_get_info(spyre_graph_t graph, spyre_graph_info* info);
/* Queues the graph's work as spyre_graph_launch does, with each launch that draws random
 * numbers (SPYRE_LAUNCH_RANDOM_STREAM) drawing from stream (seed, offset + o - o_min) instead
 * of the (s, o) it was captured with, o_min the smallest captured offset: a replay that draws
 * new numbers from the offsets offset .. offset + random_offsets - 1, as the launches queued
 * one by one with those streams would; launches that shared a stream still share one
 * (API 0.24). The graph itself is unchanged. */
SPYRE_API spyre_status spyre_graph_launch_random(spyre_graph_t graph, spyre_stream_t stream,
                                                 uint64_t seed, uint64_t offset);
/* Releases the graph; replays already queued still run. NULL is a no-op. */
SPYRE_API spyre_status spyre_graph_destroy(spyre_graph_t graph);

/* ---- Submission batching (API 0.20; Documentation/libspyre.md "Submission batching") ----
 * Work queued once goes to the card as one submission, without a capture.
 * Starts (or nests: a count per stream) a batch on `stream`, a created stream (a default stream
 * cannot batch). While it lasts, launches without statistics, device-to-device copies, 3-D
 * copies between buffers, fills (spyre.ko: below 8 MiB), peer copies, semaphore writes and
 * waits (spyre_stream_write_value / spyre_stream_wait_value, in order with the rest: a held wait
 * holds the batch's later work) and graphs of at most 256 operations (spyre_graph_launch: their
 * launches linked as captured) queued on the stream are held, arguments
 * checked, and queued together when the outermost spyre_stream_end_batch returns: one work
 * item on the simulator, one SUBMIT per DRM_SPYRE_MAX_CMDS commands and 1024 launches on the
 * kernel backend, each launch still its own job on the card (its modeled time unchanged).
 * Anything else queued on the stream or waiting for it (copies from or to the host, large fills
 * on spyre.ko, host functions, event records and waits, synchronize, query, synchronous calls, a
 * capture beginning) first queues the held work, so a batch changes how work is submitted,
 * never what it computes or in which order; 256 held operations are queued at once. Errors of
 * held work are reported as those of asynchronous work are: by the call that queues it, or at
 * the next synchronize. While the stream captures, its work goes to the capture (a batch has
 * no effect). */
SPYRE_API spyre_status spyre_stream_begin_batch(spyre_stream_t stream);
/* Ends one level of the stream's batch; the outermost queues the held work (its errors, e.g. a
 * lost card, are returned; the batch has ended either way). SPYRE_ERROR_INVALID_ARGUMENT when
 * the stream is not batching. */
SPYRE_API spyre_status spyre_stream_end_batch(spyre_stream_t stream);

SPYRE_API spyre_status spyre_event_create(spyre_device_t device, spyre_event_t* event);
SPYRE_API spyre_status spyre_event_destroy(spyre_event_t event);
/* Captures all work queued on `stream` so far (replaces an earlier record). */
SPYRE_API spyre_status spyre_event_record(spyre_event_t event, spyre_stream_t stream);
/* Waits until the recorded work has finished. */
SPYRE_API spyre_status spyre_event_synchronize(spyre_event_t event);
/* SPYRE_SUCCESS if finished (or never recorded), SPYRE_ERROR_NOT_READY if not. */
SPYRE_API spyre_status spyre_event_query(spyre_event_t event);

typedef struct spyre_event_timing {
    /* Modeled device time between the two events (launch cycles from the engine, DMA cycles
     * from the card model). Kernel backend: the jobs of their stream between them,
     * SPYRE_ERROR_NOT_SUPPORTED if they were recorded on different streams. Simulator: the
     * difference of their times on the card's timeline, where a launch and a peer copy of two
     * streams overlap; also for two streams of one card, SPYRE_ERROR_NOT_SUPPORTED for two
     * cards (libspyre.md "Modeled time"). */
    uint64_t modeled_cycles;
    uint64_t modeled_ns;
    /* Host wall clock between the moments libspyre saw each event complete (CLOCK_MONOTONIC);
     * accurate when each was waited for, e.g. with spyre_event_synchronize. */
    int64_t wall_ns;
    uint64_t reserved[4];
} spyre_event_timing;

/* Both events must have completed (else SPYRE_ERROR_NOT_READY). */
SPYRE_API spyre_status spyre_event_elapsed(spyre_event_t start, spyre_event_t end,
                                           spyre_event_timing* timing);

/* ---- Asynchronous copies (ordered on `stream`; NULL = default stream) ----
 * Host memory from spyre_host_alloc() is used in place: it must stay valid until the copy has
 * finished. Other (pageable) host memory: host->device copies take the data before they return
 * (staging); device->host copies into pageable memory return once the data has arrived. */
SPYRE_API spyre_status spyre_memcpy_htod_async(spyre_buffer_t dst, uint64_t dst_offset,
                                               const void* src, uint64_t size,
                                               spyre_stream_t stream);
SPYRE_API spyre_status spyre_memcpy_dtoh_async(void* dst, spyre_buffer_t src, uint64_t src_offset,
                                               uint64_t size, spyre_stream_t stream);
/* Device -> device. Buffers on different cards are copied through host memory: the call
 * returns once the data has left the source card; the write is ordered on `stream`, which
 * must be on the destination's card. */
SPYRE_API spyre_status spyre_memcpy_dtod_async(spyre_buffer_t dst, uint64_t dst_offset,
                                               spyre_buffer_t src, uint64_t src_offset,
                                               uint64_t size, spyre_stream_t stream);

/* ---- Peer-to-peer copies (hw 1.6, Documentation/libspyre.md "Peer-to-peer copies") ---- */

/* *can_access = 1 if `device`'s DMA engine can copy to and from `peer`'s memory: both cards
 * have SPYRE_DEVICE_CAP_P2P and are distinct cards of one backend; else 0. */
SPYRE_API spyre_status spyre_device_can_access_peer(spyre_device_t device, spyre_device_t peer,
                                                    int* can_access);

/* Lets copies issued on `device` reach `peer`'s buffers (one direction: enable both ways for
 * copies issued on either card). Enabling again is a no-op. SPYRE_ERROR_NOT_SUPPORTED, naming
 * the card, when either card lacks SPYRE_DEVICE_CAP_P2P; SPYRE_ERROR_INVALID_ARGUMENT for the
 * same card. Buffers of the peer are shared with the device lazily, at their first copy, and
 * stay shared until the buffer is freed. */
SPYRE_API spyre_status spyre_device_enable_peer_access(spyre_device_t device, spyre_device_t peer);

/* Copies `size` bytes between buffers of two cards, card to card (no host memory). The
 * synchronous form uses the source card's DMA engine (it writes into the destination card's
 * memory) on its default stream, and needs peer access from the source's card to the
 * destination's; it returns once the data has arrived. The asynchronous form runs on
 * `stream`, which must belong to the source's or the destination's card: that card's DMA
 * engine moves the bytes, and peer access must be enabled from it to the other card. Buffers
 * of one card are copied as spyre_memcpy_dtod. A peer card that was removed (unplugged,
 * driver unbound, a simulated loss) gives SPYRE_ERROR_DEVICE_LOST naming it. */
SPYRE_API spyre_status spyre_memcpy_peer(spyre_buffer_t dst, uint64_t dst_offset,
                                         spyre_buffer_t src, uint64_t src_offset, uint64_t size);
SPYRE_API spyre_status spyre_memcpy_peer_async(spyre_buffer_t dst, uint64_t dst_offset,
                                               spyre_buffer_t src, uint64_t src_offset,
                                               uint64_t size, spyre_stream_t stream);

/* Sets `size` bytes at `offset` to the byte `value`. */
SPYRE_API spyre_status spyre_memset(spyre_buffer_t buffer, uint64_t offset, int value,
                                    uint64_t size);
SPYRE_API spyre_status spyre_memset_async(spyre_buffer_t buffer, uint64_t offset, int value,
                                          uint64_t size, spyre_stream_t stream);
/* Writes `count` copies of the `pattern_size`-byte (1, 2, 4 or 8) pattern at `offset`. */
SPYRE_API spyre_status spyre_fill_async(spyre_buffer_t buffer, uint64_t offset, const void* pattern,
                                        uint32_t pattern_size, uint64_t count,
                                        spyre_stream_t stream);

/* A strided copy of depth slices of height rows of width bytes. Each side is either a device
 * buffer (buffer + offset) or host memory (host, buffer NULL); not host to host. pitch: bytes
 * between rows (>= width), slice_pitch: bytes between slices (>= pitch * height; ignored when
 * depth is 1). Device to device within one card, or between host and device. */
typedef struct spyre_memcpy3d_params {
    spyre_buffer_t src_buffer;
    uint64_t src_offset;
    const void* src_host;
    uint64_t src_pitch;
    uint64_t src_slice_pitch;
    spyre_buffer_t dst_buffer;
    uint64_t dst_offset;
    void* dst_host;
    uint64_t dst_pitch;
    uint64_t dst_slice_pitch;
    uint64_t width;       /* bytes per row */
    uint64_t height;      /* rows per slice */
    uint64_t depth;       /* slices (1 for a 2-D copy) */
    uint64_t reserved[4]; /* must be 0 */
} spyre_memcpy3d_params;

SPYRE_API spyre_status spyre_memcpy_3d(const spyre_memcpy3d_params* p);
SPYRE_API spyre_status spyre_memcpy_3d_async(const spyre_memcpy3d_params* p, spyre_stream_t stream);

#define SPYRE_LAUNCH_MAX_ARGS 16
#define SPYRE_LAUNCH_MAX_BUFFERS 255
#define SPYRE_LAUNCH_MAX_CORES 64

/* Units of spyre_core_stats.busy[]. */
#define SPYRE_LAUNCH_UNIT_SCALAR 0 /* instruction issue, scalar ALU, branches */
#define SPYRE_LAUNCH_UNIT_DMA 1    /* DDR <-> scratchpad transfers */
#define SPYRE_LAUNCH_UNIT_MATRIX 2 /* systolic arrays */
#define SPYRE_LAUNCH_UNIT_VECTOR 3 /* vector units */
#define SPYRE_LAUNCH_UNIT_RING 4   /* ring sends, all-reduce */
#define SPYRE_LAUNCH_UNITS 5

typedef struct spyre_launch_params {
    uint32_t num_cores; /* cores that run the program; 0 = all cores of the device */
    uint32_t num_args;  /* <= SPYRE_LAUNCH_MAX_ARGS */
    uint64_t args[SPYRE_LAUNCH_MAX_ARGS]; /* read by ARG: device addresses
                                             (spyre_buffer_device_address), sizes, ... */
    const spyre_buffer_t* buffers;        /* the only device memory the program may touch (besides
                                             its own image); NULL if num_buffers == 0 */
    uint32_t num_buffers;                 /* <= SPYRE_LAUNCH_MAX_BUFFERS */
    uint32_t flags;                       /* SPYRE_LAUNCH_* flags below, or 0 */
    uint64_t random_arg;  /* SPYRE_LAUNCH_RANDOM_STREAM: see there; else 0 (API 0.24) */
    uint64_t reserved[3]; /* must be 0 */
} spyre_launch_params;
/* flags (API 0.24): args[random_arg] is the seed and args[random_arg + 1] the offset of the
 * random stream the program draws from (the op library's random kernels set it). A graph that
 * captures such a launch can replay it drawing from another stream: spyre_graph_launch_random. */
#define SPYRE_LAUNCH_RANDOM_STREAM (1u << 0)

typedef struct spyre_core_stats {
    uint64_t busy[SPYRE_LAUNCH_UNITS]; /* cycles each unit was busy (SPYRE_LAUNCH_UNIT_*) */
    uint64_t end_cycle;                /* cycle the core finished */
} spyre_core_stats;

/* Modeled statistics of one launch (the engine's deterministic cycle model). */
typedef struct spyre_launch_stats {
    uint64_t total_cycles;        /* cycles of the launch: latest core end */
    uint64_t time_ns;             /* total_cycles at the device clock */
    uint64_t ddr_read_bytes;      /* device memory read by the cores (whole sticks) */
    uint64_t ddr_write_bytes;     /* device memory written by the cores */
    uint64_t ring_bytes;          /* bytes sent over the ring */
    uint64_t instructions;        /* executed, all cores */
    uint64_t macs;                /* multiply-accumulates, all cores */
    uint64_t peak_macs_per_cycle; /* of the cores that ran, for the data types of the launch's
                                     matrix work: 1024 x cores for fp16/bf16, 2048 x for int8,
                                     256 x for fp32, a MAC-weighted mix if several; fp16 if
                                     none */
    double utilization;           /* macs / (total_cycles * peak_macs_per_cycle), 0 if no cycles */
    uint32_t num_cores;           /* cores that ran: valid entries of cores[] */
    uint32_t clock_mhz;
    uint64_t reserved[6];
    spyre_core_stats cores[SPYRE_LAUNCH_MAX_CORES];
} spyre_launch_stats;

/*
 * Runs `program` on its device and waits for it. `params` gives the cores, the arguments and
 * the buffers the program may access (all on the program's device); any other device memory
 * access faults. A program fault returns SPYRE_ERROR_PROGRAM with the core, the instruction
 * index and the reason in the message; the device stays usable. `stats` (may be NULL) is filled
 * on success.
 */
SPYRE_API spyre_status spyre_launch(spyre_program_t program, const spyre_launch_params* params,
                                    spyre_launch_stats* stats);

/* Queues a launch on `stream` (NULL: the default stream of the program's card). Argument
 * errors are returned at once; a program fault is returned by the next synchronize of the
 * stream (or spyre_device_synchronize). Events recorded around it give its modeled time. */
SPYRE_API spyre_status spyre_launch_async(spyre_program_t program,
                                          const spyre_launch_params* params, spyre_stream_t stream);

/*
 * Launch labels (0.14): a label names the launches the calling thread queues while it is the
 * innermost pushed one (op-library launches and captured graph nodes included); a launch that
 * fails on the card then says who queued it ("...; launched by <label>"), also when the error
 * is reported later by a synchronize or comes from a replay of a graph that captured it. For
 * the callers of generated programs (torch.compile names the kernel and its graph nodes).
 * The simulator backend reports labels; the kernel backend does not yet. Push copies the text;
 * pop with nothing pushed is SPYRE_ERROR_INVALID_ARGUMENT.
 */
SPYRE_API spyre_status spyre_push_launch_label(const char* label);
SPYRE_API spyre_status spyre_pop_launch_label(void);

/* ---- Management (Documentation/libspyre.md "Management API") ----
 *
 * Read-only views of a card for monitoring tools (spyre-smi is built on these alone), and a
 * card reset. Every struct starts with `size`: the caller sets it to sizeof() of the struct
 * it was compiled with; the library fills the fields that fit in `size` (fields are only ever
 * appended, so older callers keep working) and refuses a size smaller than the first version
 * of the struct (SPYRE_ERROR_INVALID_ARGUMENT). A value the backend cannot provide has its
 * SPYRE_MGMT_HAS_* bit clear in `valid` and reads 0.
 *
 * Sources on the kernel backend: the driver's sysfs attributes and hwmon device
 * (Documentation/ABI/testing/sysfs-driver-spyre), QUERY telemetry, and the fdinfo of every
 * process's accel files (per-process usage). The simulator backend reports what it models
 * (Documentation/libspyre.md lists what is N/A there).
 */

typedef enum spyre_health {
    SPYRE_HEALTH_UNKNOWN = 0,
    SPYRE_HEALTH_OK = 1,        /* ready: accepts work */
    SPYRE_HEALTH_RESETTING = 2, /* a ring, card or PCI reset is in progress */
    SPYRE_HEALTH_WEDGED = 3,    /* every job fails until the card is reset (spyre_mgmt_reset) */
} spyre_health;

/* "unknown", "ok", "resetting", "wedged". Static storage. */
SPYRE_API const char* spyre_health_string(spyre_health health);

/* Bits of the `valid` fields. */
#define SPYRE_MGMT_HAS_SERIAL (1u << 0)
#define SPYRE_MGMT_HAS_PCIE_LINK (1u << 1)
#define SPYRE_MGMT_HAS_TEMPERATURE (1u << 2)
#define SPYRE_MGMT_HAS_POWER (1u << 3)
#define SPYRE_MGMT_HAS_ENGINE_BUSY (1u << 4)
#define SPYRE_MGMT_HAS_CORE_BUSY (1u << 5)
#define SPYRE_MGMT_HAS_DDR_BYTES (1u << 6)
#define SPYRE_MGMT_HAS_PCIE_BYTES (1u << 7)
#define SPYRE_MGMT_HAS_ERRORS (1u << 8)
#define SPYRE_MGMT_HAS_RECOVERY (1u << 9) /* the driver's ring/card reset counters */
#define SPYRE_MGMT_HAS_DMA_BUSY (1u << 10)
#define SPYRE_MGMT_HAS_P2P_BYTES (1u << 11) /* peer-to-peer DMA bytes (0.17) */

typedef struct spyre_mgmt_identity {
    uint32_t size;            /* in: sizeof(spyre_mgmt_identity) */
    uint32_t valid;           /* out: SPYRE_MGMT_HAS_SERIAL, SPYRE_MGMT_HAS_PCIE_LINK */
    char name[32];            /* "spyre0" */
    char pci_address[32];     /* "0000:01:00.0" */
    char serial[64];          /* the card's serial number, "" without SPYRE_MGMT_HAS_SERIAL */
    char hw_version[16];      /* "1.1" */
    char driver_name[32];     /* "spyre" (simulator: "spyre-sim") */
    char driver_version[32];  /* "1.0.0" */
    char library_version[16]; /* spyre_get_version_string() */
    char backend[16];         /* "kernel" or "sim" */
    char pcie_link_speed[16]; /* "2.5 GT/s"; "" without SPYRE_MGMT_HAS_PCIE_LINK */
    uint32_t pcie_link_width; /* lanes */
    uint32_t num_cores;
    uint32_t clock_mhz;
    int32_t numa_node; /* NUMA node of the PCI function, -1 if none or unknown */
    uint64_t reserved[4];
} spyre_mgmt_identity;

SPYRE_API spyre_status spyre_mgmt_get_identity(spyre_device_t device, spyre_mgmt_identity* id);

/* Instantaneous state of a card. */
typedef struct spyre_mgmt_status {
    uint32_t size;              /* in: sizeof(spyre_mgmt_status) */
    uint32_t valid;             /* out: SPYRE_MGMT_HAS_TEMPERATURE, SPYRE_MGMT_HAS_POWER */
    uint32_t health;            /* spyre_health */
    uint32_t temperature_mc;    /* board temperature, milli-Celsius */
    uint32_t power_mw;          /* board power draw, milliwatts */
    uint32_t power_cap_mw;      /* board power limit, milliwatts */
    uint64_t mem_total_bytes;   /* device memory */
    uint64_t mem_used_bytes;    /* in device buffers of all processes */
    uint64_t mem_free_bytes;    /* total - used */
    uint64_t host_pinned_bytes; /* pinned host memory (host buffers) of all processes */
    uint64_t reserved[4];
} spyre_mgmt_status;

SPYRE_API spyre_status spyre_mgmt_get_status(spyre_device_t device, spyre_mgmt_status* status);

/* Cumulative counters of a card, taken at one moment. Rates come from two samples
 * (spyre_mgmt_get_utilization). */
typedef struct spyre_mgmt_counters {
    uint32_t size;        /* in: sizeof(spyre_mgmt_counters) */
    uint32_t valid;       /* out: SPYRE_MGMT_HAS_* of the groups below */
    int64_t timestamp_ns; /* CLOCK_MONOTONIC when sampled */
    /* SPYRE_MGMT_HAS_ENGINE_BUSY: modeled busy time of the compute engine since power on (the
     * modeled cycles of every launch at the core clock; not wall time) */
    uint64_t engine_busy_ns;
    /* SPYRE_MGMT_HAS_DDR_BYTES: device memory read and written by the compute cores */
    uint64_t ddr_read_bytes;
    uint64_t ddr_write_bytes;
    /* SPYRE_MGMT_HAS_PCIE_BYTES: DMA over PCIe, and device-to-device DMA */
    uint64_t pcie_h2d_bytes;
    uint64_t pcie_d2h_bytes;
    uint64_t d2d_bytes;
    /* SPYRE_MGMT_HAS_ERRORS */
    uint64_t cmd_errors;    /* commands the card failed */
    uint64_t jobs_failed;   /* jobs with a failed command */
    uint64_t launch_errors; /* launches that stopped with a program fault */
    /* SPYRE_MGMT_HAS_RECOVERY (driver, since it was loaded) */
    uint64_t jobs_timed_out;
    uint64_t ring_resets; /* hung rings stopped with a ring abort */
    uint64_t card_resets; /* whole-card resets (recovery and PCI resets) */
    /* resets the card counted since power on (with SPYRE_MGMT_HAS_ERRORS) */
    uint64_t device_resets;
    /* SPYRE_MGMT_HAS_CORE_BUSY: per core, modeled cycles from each launch's start to the core's
     * halt, in ns at the core clock; num_cores entries */
    uint32_t num_cores;
    uint32_t reserved0;
    uint64_t core_busy_ns[SPYRE_LAUNCH_MAX_CORES];
    /* SPYRE_MGMT_HAS_P2P_BYTES (0.17): bytes this card's copies read from / wrote into peer
     * cards' memory since power on (part of pcie_h2d_bytes / pcie_d2h_bytes) */
    uint64_t p2p_read_bytes;
    uint64_t p2p_write_bytes;
    uint64_t reserved[2];
} spyre_mgmt_counters;

SPYRE_API spyre_status spyre_mgmt_get_counters(spyre_device_t device,
                                               spyre_mgmt_counters* counters);

/* Rates between two samples of one card. */
typedef struct spyre_mgmt_utilization {
    uint32_t size;  /* in: sizeof(spyre_mgmt_utilization) */
    uint32_t valid; /* out: the bits valid in both samples */
    int64_t interval_ns;
    double engine_percent; /* SPYRE_MGMT_HAS_ENGINE_BUSY: modeled busy time / interval, 0..100 */
    double ddr_read_bytes_per_s; /* SPYRE_MGMT_HAS_DDR_BYTES */
    double ddr_write_bytes_per_s;
    double pcie_h2d_bytes_per_s; /* SPYRE_MGMT_HAS_PCIE_BYTES */
    double pcie_d2h_bytes_per_s;
    uint32_t num_cores; /* SPYRE_MGMT_HAS_CORE_BUSY: entries of core_percent */
    uint32_t reserved0;
    double core_percent[SPYRE_LAUNCH_MAX_CORES];
    double p2p_read_bytes_per_s; /* SPYRE_MGMT_HAS_P2P_BYTES (0.17) */
    double p2p_write_bytes_per_s;
    uint64_t reserved[2];
} spyre_mgmt_utilization;

/* Pure arithmetic on two samples of the same card, `after` taken later than `before`
 * (else SPYRE_ERROR_INVALID_ARGUMENT). Percentages are capped at 100. */
SPYRE_API spyre_status spyre_mgmt_get_utilization(const spyre_mgmt_counters* before,
                                                  const spyre_mgmt_counters* after,
                                                  spyre_mgmt_utilization* util);

/* One client of a card: an open accel file of a process (kernel backend: its fdinfo). */
typedef struct spyre_mgmt_process {
    uint32_t size;  /* in: sizeof(spyre_mgmt_process), set in element 0 (the array's stride) */
    uint32_t valid; /* out: SPYRE_MGMT_HAS_ENGINE_BUSY, SPYRE_MGMT_HAS_DMA_BUSY */
    int32_t pid;
    uint32_t reserved0;
    char command[64];             /* /proc/<pid>/comm */
    uint64_t client_id;           /* the driver's client id (one per open file) */
    uint64_t device_memory_bytes; /* device buffers the client holds */
    uint64_t host_memory_bytes;   /* pinned host buffers the client holds */
    uint64_t compute_busy_ns;     /* modeled time of its launches */
    uint64_t dma_busy_ns;         /* modeled time of its copies */
    uint64_t reserved[4];
} spyre_mgmt_process;

/*
 * The clients of the device's card, by pid. Fills at most `capacity` entries of `procs`
 * (procs[0].size set by the caller; may be NULL with capacity 0) and sets *count to the number
 * of clients found (which may exceed capacity: call again with more room). The calling
 * process is included when it has the card open. On the kernel backend, processes of other
 * users are visible only to root (/proc/<pid>/fdinfo needs ptrace access).
 */
SPYRE_API spyre_status spyre_mgmt_get_processes(spyre_device_t device, spyre_mgmt_process* procs,
                                                uint32_t capacity, uint32_t* count);

/* spyre_mgmt_peer.flags */
#define SPYRE_MGMT_PEER_P2P (1u << 0) /* copies between the two cards can go card to card */
/* The cards sit below one upstream PCI bridge (a switch): peer traffic need not cross the root
 * complex. */
#define SPYRE_MGMT_PEER_SHARED_BRIDGE (1u << 1)

/* Another card as seen from one card (0.17). */
typedef struct spyre_mgmt_peer {
    uint32_t size;        /* in: sizeof(spyre_mgmt_peer), set in element 0 (the array's stride) */
    uint32_t flags;       /* SPYRE_MGMT_PEER_* */
    int32_t index;        /* the peer's device index (spyre_get_device_count order) */
    uint32_t distance;    /* PCI bridges between the two cards (the root complex counts as one
                           * when they share none); 0 when unknown (simulator: one modeled link) */
    char pci_address[16]; /* the peer's "0000:01:00.0"; "" when it has none (simulator) */
    uint64_t reserved[2];
} spyre_mgmt_peer;

/*
 * The device's card's view of every other card of its backend: the P2P path and the PCI
 * distance (kernel backend: DRM_SPYRE_QUERY_TOPOLOGY; simulator: every other simulated card,
 * P2P over the modeled peer link when both have SPYRE_DEVICE_CAP_P2P). Fills at most `capacity`
 * entries (peers[0].size set by the caller; NULL with capacity 0 counts) in device index order
 * and sets *count to the number of peers found.
 */
SPYRE_API spyre_status spyre_mgmt_get_peers(spyre_device_t device, spyre_mgmt_peer* peers,
                                            uint32_t capacity, uint32_t* count);

/* spyre_mgmt_reset flags */
#define SPYRE_MGMT_RESET_FORCE (1u << 0) /* reset even while other processes use the card */

/*
 * Resets card `index` (spyre_get_device_count order) through a PCI function reset, which the
 * driver brackets (running jobs are re-run or failed; Documentation/driver.md "Failure
 * handling"); a wedged card comes back. Needs CAP_SYS_ADMIN (SPYRE_ERROR_PERMISSION
 * otherwise). Refuses with SPYRE_ERROR_BUSY, naming them, while other processes have the card
 * open, unless SPYRE_MGMT_RESET_FORCE. The simulator backend returns SPYRE_ERROR_NOT_SUPPORTED.
 */
SPYRE_API spyre_status spyre_mgmt_reset(int index, uint32_t flags);

/* ---- Simulated faults: a test hook of the simulator backend (0.14) ----
 *
 * Documentation/libspyre.md "Simulated faults". Only for tests of what users see when a card
 * fails; other backends return SPYRE_ERROR_NOT_SUPPORTED.
 */
typedef enum spyre_sim_fault {
    SPYRE_SIM_FAULT_NONE = 0,    /* disarm, and a lost card is back (its memory as it was) */
    SPYRE_SIM_FAULT_PROGRAM = 1, /* one launch faults as a bad program: SPYRE_ERROR_PROGRAM */
    SPYRE_SIM_FAULT_LOST = 2,    /* the card is removed: SPYRE_ERROR_DEVICE_LOST from then on */
} spyre_sim_fault;

/*
 * Arms `fault` on simulated card `index` (this process's card, open or not): the launch after
 * the next `after_launches` launches on the card takes it. A program fault is one-shot (the
 * launch fails as the card reports a program that accessed memory outside its windows). A
 * lost card fails that launch and, from then on, every allocation, copy, fill, launch and
 * replay on it with SPYRE_ERROR_DEVICE_LOST ("spyre-sim0 was removed ..."), at the call when
 * the card was already lost, else at the next synchronize. SPYRE_SIM_FAULT_NONE undoes both.
 */
SPYRE_API spyre_status spyre_sim_inject_fault(int index, spyre_sim_fault fault,
                                              uint64_t after_launches);

#if defined(__cplusplus)
}
#endif

#endif /* SPYRE_SPYRE_H_ */
