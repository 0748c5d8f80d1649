/*
 * datainterrupt.c - data interrupts: messages that carry a payload.
 *
 * The client sends messages with payloads of 1, 2, ... -maxsize bytes
 * (default 1..1024, SCI_MAX_DATA_INTERRUPT_SIZE), -loops rounds.  The
 * server checks the length and every payload byte of each message and
 * echoes it back; the client checks the echo.  A final empty message ends
 * the run.  Each data interrupt has a fixed number (server: -intno, client:
 * -intno + 1).
 *
 *   datainterrupt -server [-rn CLIENT_NODE] [-intno N]
 *   datainterrupt -client [-rn SERVER_NODE] [-intno N] [-loops N] [-maxsize BYTES]
 */
#include "common/example.h"

#define DEFAULT_INTNO 0x50

/* Payload byte i of message number seq. */
static inline unsigned char pattern(unsigned int seq, unsigned int i)
{
    return (unsigned char)(seq * 7u + i * 13u + (i >> 8));
}

static int check(const unsigned char *buf, unsigned int len, unsigned int seq, const char *who)
{
    for (unsigned int i = 0; i < len; i++) {
        if (buf[i] != pattern(seq, i)) {
            printf("%s: message %u (%u bytes): byte %u is 0x%02x, expected 0x%02x\n", who, seq,
                   len, i, buf[i], pattern(seq, i));
            return -1;
        }
    }
    return 0;
}

static int run_server(sci_local_data_interrupt_t in, sci_remote_data_interrupt_t out)
{
    sci_error_t err;
    unsigned char buf[SCI_MAX_DATA_INTERRUPT_SIZE];
    unsigned int seq = 0;
    uint64_t bytes = 0;
    int rc = 0;
    for (;; seq++) {
        unsigned int len = sizeof buf;     /* in: buffer size; out: message size */
        SCIWaitForDataInterrupt(in, buf, &len, timeout_ms, NO_FLAGS, &err);
        DIE_ON_ERROR(err, "SCIWaitForDataInterrupt");
        if (len && check(buf, len, seq, "server") != 0)
            rc = 1;
        bytes += len;
        /* Echo it, the empty end message included. */
        SCITriggerDataInterrupt(out, buf, len, NO_FLAGS, &err);
        DIE_ON_ERROR(err, "SCITriggerDataInterrupt");
        if (len == 0)
            break;
    }
    printf("server: %u messages, %" PRIu64 " payload bytes received and echoed%s\n", seq, bytes,
           rc ? ", SOME WERE WRONG" : ", all correct");
    return rc;
}

static int run_client(sci_local_data_interrupt_t in, sci_remote_data_interrupt_t out,
                      unsigned int loops, unsigned int maxsize)
{
    sci_error_t err;
    unsigned char msg[SCI_MAX_DATA_INTERRUPT_SIZE], echo[SCI_MAX_DATA_INTERRUPT_SIZE];
    unsigned int seq = 0;

    /* A payload over the limit is refused (and never reaches the server). */
    unsigned char big[SCI_MAX_DATA_INTERRUPT_SIZE + 1] = { 0 };
    SCITriggerDataInterrupt(out, big, sizeof big, NO_FLAGS, &err);
    if (err != SCI_ERR_OUT_OF_RANGE)
        fail("a %zu-byte payload gave \"%s\", expected SCI_ERR_OUT_OF_RANGE", sizeof big,
             SCIGetErrorString(err));

    uint64_t bytes = 0, t0 = now_us();
    for (unsigned int round = 0; round < loops; round++) {
        for (unsigned int size = 1; size <= maxsize; size++, seq++) {
            for (unsigned int i = 0; i < size; i++)
                msg[i] = pattern(seq, i);
            SCITriggerDataInterrupt(out, msg, size, NO_FLAGS, &err);
            DIE_ON_ERROR(err, "SCITriggerDataInterrupt");
            unsigned int len = sizeof echo;
            SCIWaitForDataInterrupt(in, echo, &len, timeout_ms, NO_FLAGS, &err);
            DIE_ON_ERROR(err, "SCIWaitForDataInterrupt");
            if (len != size)
                fail("message %u: echo has %u bytes, sent %u", seq, len, size);
            if (check(echo, len, seq, "client") != 0)
                return 1;
            bytes += size;
        }
    }
    uint64_t us = now_us() - t0;
    /* The empty message ends the run; the server echoes it too. */
    SCITriggerDataInterrupt(out, msg, 0, NO_FLAGS, &err);
    DIE_ON_ERROR(err, "SCITriggerDataInterrupt (end)");
    unsigned int len = sizeof echo;
    SCIWaitForDataInterrupt(in, echo, &len, timeout_ms, NO_FLAGS, &err);
    DIE_ON_ERROR(err, "SCIWaitForDataInterrupt (end)");

    double avg = seq ? (double)us / seq : 0.0;
    printf("client: %u messages (1..%u bytes), %" PRIu64 " payload bytes, all echoes correct\n",
           seq, maxsize, bytes);
    printf("client: %.3f ms, average round trip %.2f us, %.2f MB/s of payload each way\n",
           us / 1000.0, avg, mb_per_s(bytes, us));
    return 0;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: datainterrupt -server|-client [-rn NODE] [-intno N] [-loops N]\n"
            "                     [-maxsize BYTES] [-a ADAPTER] [-timeout MS]\n"
            "  -rn NODE        the other side's node id (default: this node)\n"
            "  -intno N        server's data interrupt number; the client uses N+1 (default %u)\n"
            "  -loops N        client: rounds of 1..maxsize-byte messages (default 1)\n"
            "  -maxsize BYTES  client: largest payload (default and limit %u)\n",
            DEFAULT_INTNO, SCI_MAX_DATA_INTERRUPT_SIZE);
    exit(2);
}

int main(int argc, char **argv)
{
    int server = -1;
    unsigned int remote_node = 0, base = DEFAULT_INTNO, loops = 1;
    unsigned int maxsize = SCI_MAX_DATA_INTERRUPT_SIZE;
    sci_error_t err;

    example_name = "datainterrupt";
    for (int i = 1; i < argc; i++) {
        if (common_option(argc, argv, &i, &server, &remote_node))
            continue;
        if (!strcmp(argv[i], "-intno"))
            base = opt_uint(argc, argv, &i);
        else if (!strcmp(argv[i], "-loops"))
            loops = opt_uint(argc, argv, &i);
        else if (!strcmp(argv[i], "-maxsize"))
            maxsize = opt_uint(argc, argv, &i);
        else
            usage();
    }
    if (server < 0 || maxsize < 1 || maxsize > SCI_MAX_DATA_INTERRUPT_SIZE)
        usage();
    const char *who = server ? "server" : "client";

    sci_desc_t sd = open_descriptor();                 /* SCIInitialize, SCIOpen */
    unsigned int local_node = local_node_id();
    if (remote_node == 0)
        remote_node = local_node;

    unsigned int my_no = server ? base : base + 1, peer_no = server ? base + 1 : base;
    sci_local_data_interrupt_t in;
    SCICreateDataInterrupt(sd, &in, adapter, &my_no, NULL, NULL, SCI_FLAG_FIXED_INTNO, &err);
    if (err == SCI_ERR_BUSY)
        fail("data interrupt %u is taken on this node (another %s running? try -intno)", my_no,
             who);
    DIE_ON_ERROR(err, "SCICreateDataInterrupt");
    printf("%s: node %u, data interrupt %u; connecting to data interrupt %u on node %u\n", who,
           local_node, my_no, peer_no, remote_node);
    fflush(stdout);
    sci_remote_data_interrupt_t out;
    SCIConnectDataInterrupt(sd, &out, remote_node, adapter, peer_no, timeout_ms, NO_FLAGS, &err);
    DIE_ON_ERROR(err, "SCIConnectDataInterrupt");

    int rc = server ? run_server(in, out) : run_client(in, out, loops, maxsize);

    SCIDisconnectDataInterrupt(out, NO_FLAGS, &err);
    DIE_ON_ERROR(err, "SCIDisconnectDataInterrupt");
    SCIRemoveDataInterrupt(in, NO_FLAGS, &err);
    DIE_ON_ERROR(err, "SCIRemoveDataInterrupt");
    close_descriptor(sd);                              /* SCIClose, SCITerminate */
    printf("%s: %s\n", who, rc == 0 ? "success" : "FAILED");
    return rc;
}
