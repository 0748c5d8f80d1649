/*
 * dis/dis_types.h - DIS base types and limits shared by the SISCI headers
 * (vsci).
 *
 * Dolphin installs this header in include/dis/, beside the SISCI headers,
 * and programs include it as <dis/dis_types.h>, or as <dis_types.h> when
 * they build with -I.../include/dis as Dolphin's documentation shows.
 * sisci_types.h includes it, so a program that includes only sisci_api.h
 * sees these names too.  Same rules as the SISCI headers: only DIS names,
 * clean under the strict warning set listed in sisci_types.h.
 */
#ifndef VSCI_DIS_DIS_TYPES_H
#define VSCI_DIS_DIS_TYPES_H

#include <stddef.h>

/* Most adapters one node can have.  A vsci node has one, adapter 0; the
 * limit sizes the per-adapter arrays of programs that loop over adapters. */
#define DIS_MAX_NSCIS                  4

/* One node id per local adapter (0 where there is none). */
typedef unsigned int dis_nodeId_list_t[DIS_MAX_NSCIS];

/* Most pieces one SCIStartDmaTransferVec may have, on any queue (whatever
 * its maxEntries).  A size_t, as programs print it with %zu. */
#define DIS_DMA_MAX_VECLEN             ((size_t)256)

/* One piece of a vector DMA transfer (SCIStartDmaTransferVec): `size`
 * bytes between `local_offset` in the local segment and `remote_offset` in
 * the remote one.  `flags` must be 0. */
typedef struct {
    size_t       size;
    size_t       local_offset;
    size_t       remote_offset;
    unsigned int flags;
} dis_dma_vec_t;

/* The node id that names every member of a reflective-memory (broadcast)
 * group in SCIConnectSegment. */
#define DIS_BROADCAST_NODEID_GROUP_ALL 252

#endif /* VSCI_DIS_DIS_TYPES_H */
