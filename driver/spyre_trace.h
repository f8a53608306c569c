/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Spyre accelerator driver: tracepoints, in tracefs under events/spyre/ (Documentation/
 * driver.md, "Tracepoints"). A job is named by the client id of its file (fdinfo
 * drm-client-id; 0 for the kernel's own jobs) and its per-file job id.
 *
 * Copyright (C) 2025 The Spyre open stack authors
 */
#undef TRACE_SYSTEM
#define TRACE_SYSTEM spyre

#if !defined(__SPYRE_TRACE_H__) || defined(TRACE_HEADER_MULTI_READ)
#define __SPYRE_TRACE_H__

#include <linux/tracepoint.h>

#include "spyre_drv.h"

DECLARE_EVENT_CLASS(spyre_job,
		    TP_PROTO(const struct spyre_job *job),
		    TP_ARGS(job),
		    TP_STRUCT__entry(__string(dev, dev_name(job->sdev->drm.dev))
				     __field(u64, client_id)
				     __field(u64, job_id)
				     __field(u32, ring)
				     __field(u32, priority)
				     __field(u32, cmd_count)
				     __field(u32, status)
				     __field(u64, seqno)),
		    TP_fast_assign(__assign_str(dev);
				   __entry->client_id = job->sf ? job->sf->client_id : 0;
				   __entry->job_id = job->res->job_id;
				   __entry->ring = job->ring->idx;
				   __entry->priority = job->priority;
				   __entry->cmd_count = job->cmd_count;
				   __entry->status = job->res->status;
				   __entry->seqno = job->hw_fence_live ? job->first + 1 : 0;),
		    TP_printk("dev=%s client=%llu job=%llu ring=%u prio=%u cmds=%u status=%u seqno=%llu",
			      __get_str(dev), __entry->client_id, __entry->job_id, __entry->ring,
			      __entry->priority, __entry->cmd_count, __entry->status,
			      __entry->seqno)
);

/* SUBMIT (or a kernel job) queued the job. */
DEFINE_EVENT(spyre_job, spyre_job_submit,
	     TP_PROTO(const struct spyre_job *job),
	     TP_ARGS(job)
);

/* The job was written to its ring (again, after a reset); seqno of its first command. */
DEFINE_EVENT(spyre_job, spyre_job_run,
	     TP_PROTO(const struct spyre_job *job),
	     TP_ARGS(job)
);

/* The job finished; status DRM_SPYRE_JOB_*. */
DEFINE_EVENT(spyre_job, spyre_job_complete,
	     TP_PROTO(const struct spyre_job *job),
	     TP_ARGS(job)
);

/* The job outlived the timeout and its ring is about to be recovered. */
DEFINE_EVENT(spyre_job, spyre_job_timeout,
	     TP_PROTO(const struct spyre_job *job),
	     TP_ARGS(job)
);

/* The timer fired, but the job waits for the card's engine or is within its budget there. */
DEFINE_EVENT(spyre_job, spyre_job_timeout_deferred,
	     TP_PROTO(const struct spyre_job *job),
	     TP_ARGS(job)
);

/*
 * A recovery ended: kind "ring" (ring @ring aborted and restarted), "card" (card reset) or
 * "wedged" (the card did not come back); @ring is the guilty job's ring, -1 for none.
 */
TRACE_EVENT(spyre_reset,
	    TP_PROTO(struct spyre_device *sdev, int ring, const char *kind),
	    TP_ARGS(sdev, ring, kind),
	    TP_STRUCT__entry(__string(dev, dev_name(sdev->drm.dev))
			     __field(int, ring)
			     __string(kind, kind)),
	    TP_fast_assign(__assign_str(dev);
			   __entry->ring = ring;
			   __assign_str(kind);),
	    TP_printk("dev=%s ring=%d kind=%s", __get_str(dev), __entry->ring, __get_str(kind))
);

#endif /* __SPYRE_TRACE_H__ */

/* Out of tree: the Makefile puts this directory on the include path of spyre_trace.o. */
#undef TRACE_INCLUDE_PATH
#define TRACE_INCLUDE_PATH .
#undef TRACE_INCLUDE_FILE
#define TRACE_INCLUDE_FILE spyre_trace
#include <trace/define_trace.h>
