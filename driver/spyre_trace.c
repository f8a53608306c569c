// SPDX-License-Identifier: GPL-2.0-only
/*
 * Spyre accelerator driver: instantiates the tracepoints of spyre_trace.h.
 *
 * Copyright (C) 2025 The Spyre open stack authors
 */
#define CREATE_TRACE_POINTS
#include "spyre_trace.h"
