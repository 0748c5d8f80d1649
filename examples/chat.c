/*
 * chat.c - a two-party chat over shared memory and doorbell interrupts.
 *
 * Each side owns an "inbox": a local segment holding a ring of message
 * slots, and an interrupt (its doorbell).  A side sends a line by storing it
 * into a free slot of the PEER's inbox (through a remote map), publishing
 * the new write count there, and ringing the peer's doorbell.  The reader
 * consumes slots from its own local memory and tells the writer how far it
 * has read by storing its read count into the writer's inbox.  So every
 * side only ever polls its own local memory ("write remote, read local").
 *
 * Lines come from standard input and the peer's lines go to standard output
 * as "peer: LINE".  At end of input a side sends an end-of-file mark; a
 * side exits once its own input has ended and the peer's end mark arrived.
 * It works the same interactively and with input from a pipe or a file.
 *
 *   chat -server [-rn CLIENT_NODE] [-segid BASE]
 *   chat -client [-rn SERVER_NODE] [-segid BASE]
 *
 * The server's inbox has segment id BASE, the client's BASE + 1 (default
 * 0x5300).  Each side's doorbell number is written into its inbox header.
 * Status messages go to standard error.
 */
#include <pthread.h>
#include <stdatomic.h>

#include "common/example.h"

#define DEFAULT_SEGID 0x5300
#define NSLOTS        64
#define SLOT_TEXT     248
#define INBOX_MAGIC   0x43484154u       /* "CHAT" */

/* Slot flags. */
#define SLOT_MORE     1u                /* the line continues in the next slot */
#define SLOT_EOF      2u                /* the sender's input has ended */

struct slot {
    volatile uint32_t len;
    volatile uint32_t flags;
    char text[SLOT_TEXT];
};

struct inbox {
    /* Written by the owner before the segment becomes available. */
    volatile uint32_t magic;
    volatile uint32_t doorbell;         /* the owner's interrupt number */
    volatile uint32_t node;             /* the owner's node id */
    uint32_t pad0;
    /* Written by the peer. */
    volatile uint32_t written;          /* slots the peer has filled in this inbox */
    volatile uint32_t peer_read;        /* slots of the OWNER's messages the peer consumed */
    uint32_t pad1[10];
    struct slot slot[NSLOTS];
};

/* Shared between the sending (main) and receiving threads. */
static struct inbox *mine;              /* my inbox: local memory */
static struct inbox *theirs;            /* the peer's inbox: remote map */
static sci_local_interrupt_t my_doorbell;
static sci_remote_interrupt_t their_doorbell;
static atomic_int peer_eof;
static atomic_uint lines_received;

static void ring(int last)
{
    sci_error_t err;
    SCITriggerInterrupt(their_doorbell, NO_FLAGS, &err);
    /* The peer may see my end mark (it also polls) and leave before this
     * last ring arrives; its doorbell is gone then, which is fine. */
    if (last && err == SCI_ERR_NOT_CONNECTED)
        return;
    DIE_ON_ERROR(err, "SCITriggerInterrupt");
}

/* Send one slot's worth; waits while the peer's ring is full. */
static void send_slot(const char *text, uint32_t len, uint32_t flags)
{
    static uint32_t sent;               /* slots written into the peer's inbox */
    while (sent - mine->peer_read >= NSLOTS) {
        struct timespec ts = { 0, 1000000 };   /* ring full: wait for the reader */
        nanosleep(&ts, NULL);
    }
    struct slot *s = &theirs->slot[sent % NSLOTS];
    memcpy(s->text, text, len);
    s->len = len;
    s->flags = flags;
    SCIStoreBarrier(NULL, NO_FLAGS);    /* the slot before the count */
    theirs->written = ++sent;
    ring(flags & SLOT_EOF);             /* the trigger makes the stores visible too */
}

/* Receiving thread: wait for the doorbell, print what arrived. */
static void *receiver(void *arg)
{
    (void)arg;
    uint32_t read = 0;
    char line[64 * 1024];
    size_t have = 0;
    while (!atomic_load(&peer_eof)) {
        sci_error_t err;
        /* Wake on the doorbell, and look at least every 200 ms anyway. */
        SCIWaitForInterrupt(my_doorbell, 200, NO_FLAGS, &err);
        if (err != SCI_ERR_OK && err != SCI_ERR_TIMEOUT)
            DIE_ON_ERROR(err, "SCIWaitForInterrupt");
        while (read != mine->written) {
            __atomic_thread_fence(__ATOMIC_ACQUIRE);
            struct slot *s = &mine->slot[read % NSLOTS];
            uint32_t len = s->len, flags = s->flags;
            if (len > SLOT_TEXT)
                fail("corrupt slot %u (length %u)", read, len);
            if (have + len < sizeof line) {
                memcpy(line + have, s->text, len);
                have += len;
            }
            if (!(flags & SLOT_MORE) && !(flags & SLOT_EOF)) {
                printf("peer: %.*s\n", (int)have, line);
                fflush(stdout);
                have = 0;
                atomic_fetch_add(&lines_received, 1);
            }
            if (flags & SLOT_EOF)
                atomic_store(&peer_eof, 1);
            read++;
            /* Tell the peer how far I have read (a store into its inbox). */
            theirs->peer_read = read;
        }
    }
    return NULL;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: chat -server|-client [-rn NODE] [-segid BASE] [-a ADAPTER] [-timeout MS]\n"
            "  -rn NODE     the other side's node id (default: this node)\n"
            "  -segid BASE  server inbox id BASE, client inbox id BASE+1 (default 0x%x)\n",
            DEFAULT_SEGID);
    exit(2);
}

int main(int argc, char **argv)
{
    int server = -1;
    unsigned int remote_node = 0, base = DEFAULT_SEGID;
    sci_error_t err;

    example_name = "chat";
    for (int i = 1; i < argc; i++) {
        if (common_option(argc, argv, &i, &server, &remote_node))
            continue;
        if (!strcmp(argv[i], "-segid"))
            base = opt_uint(argc, argv, &i);
        else
            usage();
    }
    if (server < 0)
        usage();
    const char *who = server ? "server" : "client";
    unsigned int my_id = server ? base : base + 1, their_id = server ? base + 1 : base;

    sci_desc_t sd = open_descriptor();                 /* SCIInitialize, SCIOpen */
    unsigned int local_node = local_node_id();
    if (remote_node == 0)
        remote_node = local_node;

    /* My doorbell and my inbox. */
    unsigned int doorbell = server ? 0x60 : 0x61;
    SCICreateInterrupt(sd, &my_doorbell, adapter, &doorbell, NULL, NULL, NO_FLAGS, &err);
    DIE_ON_ERROR(err, "SCICreateInterrupt");
    sci_local_segment_t inbox_seg;
    sci_map_t my_map, their_map;
    mine = (struct inbox *)create_mapped_segment(
        sd, &inbox_seg, &my_map, my_id, sizeof(struct inbox),
        server ? " (another chat server running? try -segid)"
               : " (another chat client running? try -segid)");
    mine->doorbell = doorbell;
    mine->node = local_node;
    mine->magic = INBOX_MAGIC;
    make_available(inbox_seg);              /* SCIPrepareSegment, SCISetSegmentAvailable */

    /* The peer's inbox and doorbell (waits for the peer to start). */
    fprintf(stderr, "chat %s: node %u, inbox 0x%x; waiting for the peer's inbox 0x%x on node %u\n",
            who, local_node, my_id, their_id, remote_node);
    sci_remote_segment_t their_seg;
    connect_segment(sd, &their_seg, remote_node, their_id);
    if (SCIGetRemoteSegmentSize(their_seg) != sizeof(struct inbox))
        fail("segment 0x%x on node %u is not a chat inbox", their_id, remote_node);
    theirs = (struct inbox *)map_remote(their_seg, &their_map, 0, sizeof(struct inbox),
                                        "SCIMapRemoteSegment");
    if (theirs->magic != INBOX_MAGIC)
        fail("segment 0x%x on node %u is not a chat inbox", their_id, remote_node);
    connect_interrupt(sd, &their_doorbell, remote_node, theirs->doorbell, "SCIConnectInterrupt");
    fprintf(stderr, "chat %s: connected; type lines, end with EOF (Ctrl-D)\n", who);

    uint64_t t0 = now_us();
    pthread_t rx;
    if (pthread_create(&rx, NULL, receiver, NULL) != 0)
        fail("cannot start the receiving thread");

    /* Send each line of input, split into slots. */
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    unsigned int lines = 0;
    while ((n = getline(&line, &cap, stdin)) >= 0) {
        if (n > 0 && line[n - 1] == '\n')
            n--;
        size_t off = 0;
        do {
            size_t part = (size_t)n - off > SLOT_TEXT ? SLOT_TEXT : (size_t)n - off;
            send_slot(line + off, (uint32_t)part, off + part < (size_t)n ? SLOT_MORE : 0);
            off += part;
        } while (off < (size_t)n);
        lines++;
    }
    free(line);
    send_slot("", 0, SLOT_EOF);
    fprintf(stderr, "chat %s: sent %u lines and end of input; waiting for the peer's end\n",
            who, lines);

    pthread_join(rx, NULL);
    uint64_t us = now_us() - t0;
    fprintf(stderr, "chat %s: sent %u lines, received %u lines in %.3f ms\n", who, lines,
            atomic_load(&lines_received), us / 1000.0);

    /* Both ends have finished.  The peer may still store its read count
     * into my inbox or hold a map of it: removing it sends the peer
     * SCI_CB_LOST and its map stays plain memory, so that is harmless. */
    SCIDisconnectInterrupt(their_doorbell, NO_FLAGS, &err);
    DIE_ON_ERROR(err, "SCIDisconnectInterrupt");
    SCIUnmapSegment(their_map, NO_FLAGS, &err);
    DIE_ON_ERROR(err, "SCIUnmapSegment");
    SCIDisconnectSegment(their_seg, NO_FLAGS, &err);
    DIE_ON_ERROR(err, "SCIDisconnectSegment");
    remove_mapped_segment(inbox_seg, my_map, 1);
    SCIRemoveInterrupt(my_doorbell, NO_FLAGS, &err);
    DIE_ON_ERROR(err, "SCIRemoveInterrupt");
    close_descriptor(sd);                              /* SCIClose, SCITerminate */
    fprintf(stderr, "chat %s: done\n", who);
    return 0;
}
