/*
 * t_memhog MIB: a program that needs more memory than its machine has.
 * It fills MIB mebibytes page by page with words that name the page and
 * the word, reports how much of itself the kernel swapped out, then reads
 * every page back in a scattered order and checks every word.
 *
 * Prints "MEMHOG OK pages=N swapped_kib=K secs=S" (S: the time the fill
 * and the check took) or "MEMHOG BAD page=P word=W" (exit 1). The guest swap test runs it in a guest whose swap device is
 * memory lent by another node (crates/vsci-systest/tests/lending.rs).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PAGE 4096u
#define WORDS (PAGE / sizeof(uint64_t))

static uint64_t word_for(uint64_t page, uint64_t w)
{
	return (page * 0x9e3779b97f4a7c15ull) ^ (w << 1) ^ 0x5a5a5a5a00000001ull;
}

static long swapped_kib(void)
{
	char line[256];
	long kib = -1;
	FILE *f = fopen("/proc/self/status", "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof line, f))
		if (sscanf(line, "VmSwap: %ld kB", &kib) == 1)
			break;
	fclose(f);
	return kib;
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: t_memhog MIB\n");
		return 2;
	}
	uint64_t pages = strtoull(argv[1], NULL, 0) * (1u << 20) / PAGE;
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	uint64_t *mem = malloc(pages * PAGE);
	if (!mem) {
		printf("MEMHOG NOMEM\n");
		return 1;
	}
	for (uint64_t p = 0; p < pages; p++)
		for (uint64_t w = 0; w < WORDS; w++)
			mem[p * WORDS + w] = word_for(p, w);
	long kib = swapped_kib();
	/* A stride coprime with the page count visits every page once, far
	 * from the order they were written in. */
	uint64_t stride = 7919;
	while (pages % stride == 0)
		stride += 2;
	for (uint64_t i = 0, p = 0; i < pages; i++, p = (p + stride) % pages)
		for (uint64_t w = 0; w < WORDS; w++)
			if (mem[p * WORDS + w] != word_for(p, w)) {
				printf("MEMHOG BAD page=%llu word=%llu\n", (unsigned long long)p, (unsigned long long)w);
				return 1;
			}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	printf("MEMHOG OK pages=%llu swapped_kib=%ld secs=%.2f\n", (unsigned long long)pages, kib,
	       (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9);
	return 0;
}
