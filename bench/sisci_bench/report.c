#include "sisci_bench.h"

/* ------------------------------------------------------------------------ */

uint64_t g_clock_step;   /* smallest non-zero step between two readings */

static void print_phase_errors(int phase)
{
    if (!R->ran[phase] || R->ok[phase])
        return;
    printf("  !! phase \"%s\" FAILED\n", phase_names[phase]);
    for (int r = 0; r < 2; r++)
        if (R->err[phase][r][0])
            printf("  !!   worker %c: %s\n", r ? 'B' : 'A', R->err[phase][r]);
    if (R->note[phase][0])
        printf("  !!   %s\n", R->note[phase]);
}

static void lat_cell(const lat_t *L)
{
    if (L->n)
        printf(" %9.3f %9.3f", L->med, L->p99);
    else
        printf(" %9s %9s", "-", "-");
}

static void ratio_cell(const lat_t *v, const lat_t *p)
{
    if (v->n && p->n && p->med > 0) {
        double r = v->med / p->med;
        printf(r < 0.095 ? "  %7.4fx" : "  %7.2fx", r);
    } else {
        printf("  %8s", "-");
    }
}

/* The raw memfd polling ping-pong of section b for a given size, if measured. */
static const lat_t *raw_pp(size_t size)
{
    for (int i = 0; i < R->pp_n; i++)
        if (R->pp_size[i] == size && R->pp_raw[i].n)
            return &R->pp_raw[i];
    return NULL;
}

static void poll_ratio_cell(const lat_t *v, size_t size)
{
    const lat_t *p = raw_pp(size);
    if (p)
        ratio_cell(v, p);
    else
        printf("  %8s", "-");
}

static void sleeps_cell(const lat_t *v, const lat_t *p)
{
    char a[16] = "-", b[16] = "-", cell[40];
    if (v->n && v->sleeps >= 0)
        snprintf(a, sizeof a, "%.2f", v->sleeps);
    if (p->n && p->sleeps >= 0)
        snprintf(b, sizeof b, "%.2f", p->sleeps);
    snprintf(cell, sizeof cell, "%s/%s", a, b);
    printf(" %11s", cell);
}

static void bad_note(const lat_t *v, const lat_t *p)
{
    if (v->bad || p->bad)
        printf("   !! wrong payloads: vsci %u, peer %u", v->bad, p->bad);
}

/* One row of print_hist(): bucket b of each column, in % of its samples. */
static void print_hist_row(const char *lab, const lat_t *cols[], int ncol, int b)
{
    printf("  %-12s", lab);
    for (int c = 0; c < ncol; c++) {
        if (cols[c]->n)
            printf(" %9.2f%%", 100.0 * cols[c]->hist[b] / cols[c]->n);
        else
            printf(" %10s", "-");
    }
    printf("\n");
}

static void print_hist(const char *title, const lat_t *cols[], const char *names[], int ncol)
{
    int last = -1;
    for (int c = 0; c < ncol; c++)
        for (int b = 0; b < NB; b++)
            if (cols[c]->hist[b] && b > last)
                last = b;
    int any_over = 0;
    for (int c = 0; c < ncol; c++)
        any_over |= cols[c]->hist[NB] != 0;
    printf("\n  %s: RTT/2 histogram, %% of samples per 10 us bucket\n", title);
    printf("  %-12s", "bucket (us)");
    for (int c = 0; c < ncol; c++)
        printf(" %10s", names[c]);
    printf("\n");
    int skipping = 0;
    for (int b = 0; b <= last; b++) {
        int empty = 1;
        for (int c = 0; c < ncol; c++)
            empty &= cols[c]->hist[b] == 0;
        if (empty) {                            /* fold runs of empty buckets */
            if (!skipping)
                printf("  %-12s\n", "  ...");
            skipping = 1;
            continue;
        }
        skipping = 0;
        char lab[32];
        snprintf(lab, sizeof lab, "%3d-%-3d", b * 10, (b + 1) * 10);
        print_hist_row(lab, cols, ncol, b);
    }
    if (any_over) {
        char lab[32];
        snprintf(lab, sizeof lab, ">=%d", NB * 10);
        print_hist_row(lab, cols, ncol, NB);
    }
}

void print_header(void)
{
    print_machine("sisci_bench");
    printf("run     : %s  (mode %s%s; sections %s)\n", g_cmd, opt.quick ? "quick" : "default",
           opt.pin ? ", A pinned to cpu0, B to cpu1" : ", nothing pinned", opt.sections);
    printf("method  : parent forks two worker processes A and B per phase, each with its own\n"
           "          SCIOpen; times from clock_gettime(CLOCK_MONOTONIC) in A (smallest step\n"
           "          between two readings here: %llu ns).  MB/s = 10^6 B/s.\n",
           (unsigned long long)g_clock_step);
    printf("          "
           "Latencies are RTT/2 in microseconds (median, p99).  ratio = vsci / peer:\n"
           "          for bandwidth higher is better, for latency lower is better (1.00x = peer).\n");
    if (g_nproc <= 2)
        printf("          %ld cores: busy-polling on both sides uses every core; the coordinator\n"
               "          sleeps while workers run.\n", g_nproc);
}

void print_results(void)
{
    char b1[32];
    if (R->node_id)
        printf("node id : %d\n", R->node_id);

    if (want('a')) {
        printf("\n[a] segment write bandwidth: A memcpy()s a buffer into its map of B's segment\n"
               "    and calls SCIFlush(NULL,0) after each copy (seed 000 thesis style).\n"
               "    peer = memcpy() into private memory of A; memcpy + a seq_cst fence\n"
               "    (`lock or` on x86-64) and memcpy + a call of a shared-library function\n"
               "    that does nothing (getpagesize: the floor of any SCIFlush) shown for reference.\n"
               "    best of %d runs of >= %.0f ms each, interleaved.\n",
               opt.bw_rounds, opt.bw_time * 1e3);
        printf("  %9s %12s %12s %9s %15s %10s %14s %9s\n", "size", "vsci MB/s", "peer MB/s",
               "ratio", "memcpy+fence", "vs fence", "memcpy+call", "vs call");
        for (int i = 0; i < R->bw_n; i++) {
            if (R->bw_vsci[i] <= 0)
                continue;
            printf("  %9s %12.1f %12.1f %8.2fx %15.1f %9.2fx %14.1f %8.2fx\n",
                   fmt_size(R->bw_size[i], b1, sizeof b1), R->bw_vsci[i], R->bw_mem[i],
                   R->bw_vsci[i] / R->bw_mem[i], R->bw_fence[i],
                   R->bw_vsci[i] / R->bw_fence[i], R->bw_call[i], R->bw_vsci[i] / R->bw_call[i]);
        }
        if (R->bw_verified)
            printf("  data check: 8 MiB written through A's map %s in B's local map\n",
                   R->bw_verified > 0 ? "read back identical" : "DIFFERS (!!)");
        print_phase_errors(PH_BW);
    }

    if (want('b')) {
        printf("\n[b] ping-pong latency through segments: each side writes a message (payload,\n"
               "    SCIStoreBarrier, then a 4-byte flag in the last 4 bytes) into its map of the\n"
               "    peer's segment and busy-waits on its own local segment for the reply.\n"
               "    peer = the same protocol on a plain memfd mapped MAP_SHARED by both\n"
               "    processes (no SISCI, no barrier call; x86 stores are ordered).\n"
               "    vsci and peer alternate in %d rounds per size; samples are pooled.\n",
               opt.pp_rounds);
        printf("  %9s %9s %9s %9s %9s %9s\n", "size", "vsci med", "vsci p99", "peer med",
               "peer p99", "ratio");
        for (int i = 0; i < R->pp_n; i++) {
            if (!R->pp_vsci[i].n && !R->pp_raw[i].n)
                continue;
            printf("  %9s", fmt_size(R->pp_size[i], b1, sizeof b1));
            lat_cell(&R->pp_vsci[i]);
            lat_cell(&R->pp_raw[i]);
            ratio_cell(&R->pp_vsci[i], &R->pp_raw[i]);
            bad_note(&R->pp_vsci[i], &R->pp_raw[i]);
            printf("   (n=%u)\n", R->pp_vsci[i].n);
        }
        print_phase_errors(PH_PP);
    }

    if (want('c')) {
        printf("\n[c] interrupt latency: SCITriggerInterrupt / SCIWaitForInterrupt ping-pong\n"
               "    between A and B, one fresh pair of processes per VSCI_WAIT strategy.\n"
               "    peer = blocking eventfd ping-pong (write / read) between two processes.\n");
        printf("    \"vs poll\" = vsci median / median of the raw memfd polling ping-pong\n"
               "    of [b] at 4 B, the physical limit for a polled wake-up.\n");
        printf("    sleeps = voluntary context switches of A per round trip (vsci/peer):\n"
               "    0 = the wait never slept in the kernel, 1 = it slept every time.\n");
        printf("  %-9s %9s %9s %9s %9s %9s %9s %11s\n", "wait", "vsci med", "vsci p99",
               "peer med", "peer p99", "ratio", "vs poll", "sleeps");
        for (int m = 0; m < NMODES; m++) {
            printf("  %-9s", wait_modes[m]);
            lat_cell(&R->intr[m]);
            lat_cell(&R->intr_peer);
            ratio_cell(&R->intr[m], &R->intr_peer);
            poll_ratio_cell(&R->intr[m], 4);
            sleeps_cell(&R->intr[m], &R->intr_peer);
            printf("   (n=%u)\n", R->intr[m].n);
        }
        const lat_t *cols[] = { &R->intr[0], &R->intr[1], &R->intr[2], &R->intr_peer };
        const char *names[] = { "adaptive", "poll", "block", "eventfd" };
        print_hist("interrupts", cols, names, 4);
        for (int p = PH_INT0; p <= PH_PEER; p++)
            print_phase_errors(p);
    }

    if (want('d')) {
        printf("\n[d] data-interrupt latency: SCITriggerDataInterrupt / SCIWaitForDataInterrupt\n"
               "    ping-pong carrying the payload (first word = sequence number, checked).\n"
               "    peer = blocking eventfd ping-pong, payload copied through a memfd mapping.\n");
        printf("    \"vs poll\" = vsci median / raw memfd polling ping-pong of [b], same size.\n");
        printf("  %-8s %-9s %9s %9s %9s %9s %9s %9s %11s\n", "payload", "wait", "vsci med",
               "vsci p99", "peer med", "peer p99", "ratio", "vs poll", "sleeps");
        for (int d = 0; d < 2; d++)
            for (int m = 0; m < NMODES; m++) {
                printf("  %-8s %-9s", fmt_size(di_sizes[d], b1, sizeof b1), wait_modes[m]);
                lat_cell(&R->dint[d][m]);
                lat_cell(&R->dint_peer[d]);
                ratio_cell(&R->dint[d][m], &R->dint_peer[d]);
                poll_ratio_cell(&R->dint[d][m], di_sizes[d]);
                sleeps_cell(&R->dint[d][m], &R->dint_peer[d]);
                bad_note(&R->dint[d][m], &R->dint_peer[d]);
                printf("   (n=%u)\n", R->dint[d][m].n);
            }
        for (int d = 0; d < 2; d++) {
            const lat_t *cols[] = { &R->dint[d][0], &R->dint[d][1], &R->dint[d][2],
                                    &R->dint_peer[d] };
            const char *names[] = { "adaptive", "poll", "block", "eventfd+shm" };
            char t[64];
            snprintf(t, sizeof t, "data interrupts, %s payload",
                     fmt_size(di_sizes[d], b1, sizeof b1));
            print_hist(t, cols, names, 4);
        }
        if (!want('c'))
            for (int p = PH_INT0; p <= PH_PEER; p++)
                print_phase_errors(p);
    }
}

static void json_ratio(FILE *f, const lat_t *v, const lat_t *p)
{
    if (v->n && p->n && p->med > 0)
        json_num(f, v->med / p->med);
    else
        fputs("null", f);
}

int write_json(const char *path)
{
    FILE *f = json_open("sisci_bench", path);
    if (!f)
        return 0;
    json_preamble(f, "sisci_bench", opt.quick, 1, g_clock_step);
    fprintf(f, ",\n  \"node_id\": %d,\n  \"pinned\": %s,\n", R->node_id,
            opt.pin ? "true" : "false");
    fputs("  \"units\": {\"bandwidth\": \"MB/s (1e6 B/s)\", \"latency\": "
          "\"microseconds, RTT/2\", \"ratio\": \"vsci / peer\"},\n", f);

    fputs("  \"phases\": [", f);
    int first = 1;
    for (int p = 0; p < NPHASES; p++) {
        if (!R->ran[p])
            continue;
        fprintf(f, "%s\n    {\"name\": ", first ? "" : ",");
        first = 0;
        json_str(f, phase_names[p]);
        fprintf(f, ", \"ok\": %s, \"errors\": [", R->ok[p] ? "true" : "false");
        int fe = 1;
        for (int r = 0; r < 2; r++)
            if (R->err[p][r][0]) {
                char m[360];
                snprintf(m, sizeof m, "worker %c: %s", r ? 'B' : 'A', R->err[p][r]);
                fputs(fe ? "" : ", ", f);
                fe = 0;
                json_str(f, m);
            }
        if (R->note[p][0]) {
            fputs(fe ? "" : ", ", f);
            json_str(f, R->note[p]);
        }
        fputs("]}", f);
    }
    fputs("\n  ],\n", f);

    fprintf(f, "  \"write_bandwidth\": {\"peer\": \"memcpy into private memory\", "
               "\"vsci\": \"memcpy into remote map + SCIFlush per iteration\", "
               "\"data_check\": %s, \"rows\": [",
            R->bw_verified > 0 ? "\"ok\"" : R->bw_verified < 0 ? "\"mismatch\"" : "null");
    first = 1;
    for (int i = 0; i < R->bw_n; i++) {
        if (R->bw_vsci[i] <= 0)
            continue;
        fprintf(f, "%s\n    {\"size\": %zu, \"vsci_MBps\": ", first ? "" : ",", R->bw_size[i]);
        first = 0;
        json_num(f, R->bw_vsci[i]);
        fputs(", \"peer_MBps\": ", f);
        json_num(f, R->bw_mem[i]);
        fputs(", \"ratio\": ", f);
        json_num(f, R->bw_vsci[i] / R->bw_mem[i]);
        fputs(", \"memcpy_fence_MBps\": ", f);
        json_num(f, R->bw_fence[i]);
        fputs(", \"memcpy_call_MBps\": ", f);
        json_num(f, R->bw_call[i]);
        fputs("}", f);
    }
    fputs("\n  ]},\n", f);

    fputs("  \"pingpong\": {\"peer\": \"memfd MAP_SHARED polling ping-pong\", \"rows\": [", f);
    first = 1;
    for (int i = 0; i < R->pp_n; i++) {
        if (!R->pp_vsci[i].n && !R->pp_raw[i].n)
            continue;
        fprintf(f, "%s\n    {\"size\": %zu, \"vsci\": ", first ? "" : ",", R->pp_size[i]);
        first = 0;
        json_lat(f, &R->pp_vsci[i]);
        fputs(", \"peer\": ", f);
        json_lat(f, &R->pp_raw[i]);
        fputs(", \"ratio\": ", f);
        json_ratio(f, &R->pp_vsci[i], &R->pp_raw[i]);
        fputs("}", f);
    }
    fputs("\n  ]},\n", f);

    fputs("  \"interrupt\": {\"peer_name\": \"blocking eventfd ping-pong\", \"peer\": ", f);
    json_lat(f, &R->intr_peer);
    fputs(", \"rows\": [", f);
    for (int m = 0; m < NMODES; m++) {
        fprintf(f, "%s\n    {\"wait\": \"%s\", \"vsci\": ", m ? "," : "", wait_modes[m]);
        json_lat(f, &R->intr[m]);
        fputs(", \"ratio\": ", f);
        json_ratio(f, &R->intr[m], &R->intr_peer);
        fputs(", \"ratio_vs_raw_poll\": ", f);
        if (raw_pp(4))
            json_ratio(f, &R->intr[m], raw_pp(4));
        else
            fputs("null", f);
        fputs("}", f);
    }
    fputs("\n  ]},\n", f);

    fputs("  \"data_interrupt\": {\"peer_name\": \"blocking eventfd ping-pong + payload "
          "through memfd\", \"rows\": [", f);
    first = 1;
    for (int d = 0; d < 2; d++)
        for (int m = 0; m < NMODES; m++) {
            fprintf(f, "%s\n    {\"payload\": %u, \"wait\": \"%s\", \"vsci\": ",
                    first ? "" : ",", di_sizes[d], wait_modes[m]);
            first = 0;
            json_lat(f, &R->dint[d][m]);
            fputs(", \"peer\": ", f);
            json_lat(f, &R->dint_peer[d]);
            fputs(", \"ratio\": ", f);
            json_ratio(f, &R->dint[d][m], &R->dint_peer[d]);
            fputs(", \"ratio_vs_raw_poll\": ", f);
            if (raw_pp(di_sizes[d]))
                json_ratio(f, &R->dint[d][m], raw_pp(di_sizes[d]));
            else
                fputs("null", f);
            fputs("}", f);
        }
    fputs("\n  ]}\n}\n", f);
    return json_close("sisci_bench", f, path);
}

