/*
 * vsci_tmem.h - a page store (tmem) over memory lent by other vsci nodes.
 *
 * NAME
 *   vsci_tmem_open, vsci_tmem_close, vsci_tmem_new_pool,
 *   vsci_tmem_destroy_pool, vsci_tmem_put, vsci_tmem_get,
 *   vsci_tmem_flush_page, vsci_tmem_flush_object, vsci_tmem_page_node,
 *   vsci_tmem_stats - put, get and flush 4 KiB pages in lent memory
 *
 * SYNOPSIS
 *   #include <vsci_tmem.h>
 *   cc prog.c $(pkg-config --cflags --libs sisci)
 *
 * DESCRIPTION
 *   A vsci extension, not part of Dolphin's SISCI.  In the manner of Xen's
 *   transcendent memory, pages of VSCI_TMEM_PAGE_SIZE bytes are stored under
 *   a key (pool, object, index) and fetched or forgotten by that key.  The
 *   page bytes live only in memory borrowed from lenders (nodes running
 *   `vscid --lend SIZE`); every put and get is one RMA transfer straight to
 *   the lender's memory.  Which key is in which page (the index) lives in
 *   the calling process.
 *
 *   vsci_tmem_open() connects to the node as SCIOpen() does (the socket in
 *   VSCI_SOCKET, else the default) and borrows `capacity` bytes, rounded
 *   down to whole pages, spread over the `nlenders` node ids at `lenders`:
 *   page slot s lives on lenders[s % nlenders].  Everything is given back
 *   if a lender refuses.  The store is private to the process; its pools
 *   are not shared with other stores.
 *
 *   vsci_tmem_new_pool() makes a pool and returns its id (>= 0; ids are
 *   never reused within a store).  A persistent pool (`persistent` != 0)
 *   keeps every page put until it is flushed: a later get returns it.  An
 *   ephemeral pool (`persistent` == 0) may lose pages at any time: a get
 *   may find nothing.  vsci_tmem_destroy_pool() forgets a pool and all its
 *   pages.
 *
 *   vsci_tmem_put() stores VSCI_TMEM_PAGE_SIZE bytes at `page` under the
 *   key, replacing what the key held.  When no page slot is free, the
 *   oldest ephemeral page (of any ephemeral pool of the store) is dropped to
 *   make room, for puts into pools of either kind; when every slot holds a
 *   persistent page the put fails with SCI_ERR_NOSPC and nothing changes
 *   (the caller keeps its page: frontswap would write it to the real swap
 *   device instead).
 *
 *   vsci_tmem_get() copies the key's page into the VSCI_TMEM_PAGE_SIZE
 *   bytes at `page` and returns 1, or returns 0 if the key holds nothing
 *   (never put, flushed, or dropped from an ephemeral pool).  The page
 *   stays stored.  `page` is written only when the whole page arrived.
 *
 *   vsci_tmem_flush_page() forgets one key; vsci_tmem_flush_object()
 *   every key of `object` in the pool.  Forgetting a key that holds
 *   nothing is not an error.
 *
 *   vsci_tmem_page_node() returns the node id of the lender holding the
 *   key's page, or 0 if the key holds nothing.
 *
 *   vsci_tmem_stats() fills `*stats` with counts of what the store did and
 *   how full it is.
 *
 *   vsci_tmem_close() gives the memory back and closes the store's
 *   connection; its pages are gone.  NULL or an already closed store is
 *   ignored.  Exiting without closing gives the memory back too (the node
 *   sees the connection close).
 *
 *   Every call may be made from several threads at once on one store.
 *
 * RETURN VALUE
 *   vsci_tmem_open() returns the store, or NULL on error.
 *   vsci_tmem_new_pool() returns the pool id, or -1 on error.
 *   vsci_tmem_get() returns 1 (found), 0 (absent) or -1 on error.
 *   Every call but vsci_tmem_close() reports through `*error` (which may be
 *   NULL if the caller does not want it).
 *
 * ERRORS
 *   SCI_ERR_ILLEGAL_PARAMETER  a NULL, closed or unknown store; NULL
 *                              `lenders`, `page` or `stats`; `nlenders` 0
 *                              or above 1024; `capacity` below one page;
 *                              a negative, unknown or destroyed pool.
 *   SCI_ERR_NOSPC              open: a lender has not that much memory
 *                              left to lend (or lends none).  put: every
 *                              page slot holds a persistent page.
 *   SCI_ERR_NO_SUCH_NODEID     open: a lender is not in the cluster.
 *   SCI_ERR_TRANSFER_FAILED    put, get: the lender holding the page slot
 *                              is gone (it died or its link did).  A put
 *                              stores nothing (what the key held is kept);
 *                              a get leaves `page` untouched.  From then
 *                              on the store does not use that lender: the
 *                              pages it held are lost and their gets fail
 *                              at once with this error (never other
 *                              bytes, nor 0 for a persistent page) until
 *                              they are flushed or put again; its free
 *                              slots go out of use (pages_lost), so new
 *                              puts go to the other lenders and capacity
 *                              shrinks.  Pages of the other lenders are
 *                              unaffected.
 *   SCI_ERR_NO_LINK_ACCESS     open: no vscid answers at the socket.
 */
#ifndef VSCI_TMEM_H
#define VSCI_TMEM_H

#include "sisci_error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define VSCI_TMEM_PAGE_SIZE 4096

typedef struct vsci_tmem vsci_tmem_t;

typedef struct {
    unsigned long long puts;            /* puts that stored their page */
    unsigned long long puts_refused;    /* puts refused: SCI_ERR_NOSPC */
    unsigned long long gets;            /* gets asked */
    unsigned long long hits;            /* gets that returned a page */
    unsigned long long misses;          /* gets that found nothing */
    unsigned long long evictions;       /* ephemeral pages dropped for room */
    unsigned long long transfer_errors; /* puts and gets that failed */
    unsigned long long pages_used;      /* slots in use (or being freed) */
    unsigned long long pages_lost;      /* slots of failed lenders */
    unsigned long long capacity_pages;  /* slots in all */
} vsci_tmem_stats_t;

vsci_tmem_t *vsci_tmem_open(const unsigned int *lenders, unsigned int nlenders,
                            unsigned long long capacity, sci_error_t *error);
void vsci_tmem_close(vsci_tmem_t *t);

int  vsci_tmem_new_pool(vsci_tmem_t *t, int persistent, sci_error_t *error);
void vsci_tmem_destroy_pool(vsci_tmem_t *t, int pool, sci_error_t *error);

void vsci_tmem_put(vsci_tmem_t *t, int pool, unsigned long long object,
                   unsigned int index, const void *page, sci_error_t *error);
int  vsci_tmem_get(vsci_tmem_t *t, int pool, unsigned long long object,
                   unsigned int index, void *page, sci_error_t *error);
void vsci_tmem_flush_page(vsci_tmem_t *t, int pool, unsigned long long object,
                          unsigned int index, sci_error_t *error);
void vsci_tmem_flush_object(vsci_tmem_t *t, int pool, unsigned long long object,
                            sci_error_t *error);

unsigned int vsci_tmem_page_node(vsci_tmem_t *t, int pool, unsigned long long object,
                                 unsigned int index, sci_error_t *error);
void vsci_tmem_stats(vsci_tmem_t *t, vsci_tmem_stats_t *stats, sci_error_t *error);

#ifdef __cplusplus
}
#endif

#endif /* VSCI_TMEM_H */
