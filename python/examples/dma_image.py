#!/usr/bin/env python3
"""A numpy image written into another program's segment by DMA, with asyncio.

    python3 dma_image.py --display [--save out.pgm]       # first
    python3 dma_image.py --render [--rn DISPLAY_NODE]

The display creates a segment holding one 16-bit grey image (--height x
--width) and an interrupt (number 0x41), and waits.  The renderer computes
the image with numpy in its own memory, connects to the display's segment
and moves the image there with DMA: one transfer per band of rows, each on
its own queue, all in flight at once (``await queue.transfer_mem_async``,
gathered by asyncio), then triggers the display's interrupt.  The display
looks at the image through a numpy array over its map -- no copy -- checks
every pixel, and can save it as a PGM file.
"""
import argparse
import asyncio
import sys
import time

import numpy as np

import sisci

SEGID = 0x6100
INTNO = 0x41


def render(h: int, w: int) -> np.ndarray:
    """A deterministic test image: a Mandelbrot set, 16-bit grey."""
    y, x = np.mgrid[-1.2:1.2:h * 1j, -2.0:0.8:w * 1j]
    c = x + 1j * y
    z = np.zeros_like(c)
    n = np.zeros(c.shape, dtype=np.uint16)
    for i in range(48):
        z = np.where(np.abs(z) <= 2, z * z + c, z)
        n += (np.abs(z) <= 2).astype(np.uint16)
    return (n * (65535 // 48)).astype(np.uint16)


def display(sd, h, w, timeout, save):
    with sd.create_interrupt(INTNO, fixed=True) as ready, sd.create_segment(SEGID, h * w * 2) as seg:
        seg.make_available()
        print(f"display: node {sisci.local_node_id()}, segment {SEGID:#x} for a {w}x{h} image", flush=True)
        ready.wait(timeout)
        with seg.map() as m:
            img = m.array(np.uint16, shape=(h, w))     # the segment itself, no copy
            ok = np.array_equal(img, render(h, w))
            print(f"display: image {'matches' if ok else 'DIFFERS'} (mean {img.mean():.1f})", flush=True)
            if save:
                with open(save, "wb") as f:
                    f.write(b"P5\n%d %d\n65535\n" % (w, h))
                    f.write(img.astype(">u2").tobytes())
            del img
    return 0 if ok else 1


async def send(sd, node, h, w, bands, timeout):
    img = render(h, w)
    seg = sd.connect_segment(node, SEGID, timeout)
    queues = [sd.create_dma_queue() for _ in range(bands)]
    rows = np.array_split(np.arange(h), bands)
    t0 = time.monotonic()
    await asyncio.gather(*(q.transfer_mem_async(img[r[0]:r[-1] + 1], seg, int(r[0]) * w * 2)
                           for q, r in zip(queues, rows)))
    ms = (time.monotonic() - t0) * 1000
    print(f"render: {img.nbytes} bytes in {bands} DMA transfers in {ms:.2f} ms", flush=True)
    with sd.connect_interrupt(node, INTNO, timeout) as ready:
        ready.trigger()
    for q in queues:
        q.close()
    seg.close()
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    role = ap.add_mutually_exclusive_group(required=True)
    role.add_argument("--display", action="store_true")
    role.add_argument("--render", action="store_true")
    ap.add_argument("--rn", type=int, help="the display's node id (default: this node)")
    ap.add_argument("--height", type=int, default=480)
    ap.add_argument("--width", type=int, default=640)
    ap.add_argument("--bands", type=int, default=4, help="DMA transfers in flight at once")
    ap.add_argument("--save", help="the display writes the image to this PGM file")
    ap.add_argument("--timeout", type=float, default=60.0)
    a = ap.parse_args()
    with sisci.Descriptor() as sd:
        if a.display:
            return display(sd, a.height, a.width, a.timeout, a.save)
        node = a.rn if a.rn is not None else sisci.local_node_id()
        return asyncio.run(send(sd, node, a.height, a.width, a.bands, a.timeout))


if __name__ == "__main__":
    sys.exit(main())
