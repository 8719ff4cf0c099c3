"""llama.cpp's quantize_row_q8_0_ref in NumPy, checking attend's Q8_0 blocks byte for byte.

Usage: q8_0_reference.py FILE.gguf, a GGUF holding tensor "src" (F32) and tensor "x" (Q8_0,
the same values). Reads the file with its own small GGUF parser (not attend's), quantizes
"src" as llama.cpp does (ggml-quants.c), and prints "blocks equal: K of N".

llama.cpp, per block of 32 floats, in f32: amax = max |x|; d = amax / 127;
id = 1/d (0 when d is 0); q = roundf(x * id) (half away from zero); stored d = fp16(d)
(round to nearest even).
"""
import struct
import sys

import numpy as np


def read_gguf(path):
    data = open(path, "rb").read()
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from("<" + fmt, data, pos)
        pos += struct.calcsize("<" + fmt)
        return v[0]

    def string():
        nonlocal pos
        n = take("Q")
        s = data[pos:pos + n]
        pos += n
        return s

    sizes = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "B", 10: "Q", 11: "q", 12: "d"}

    def value(t):
        if t == 8:
            return string()
        if t == 9:
            et, n = take("I"), take("Q")
            return [value(et) for _ in range(n)]
        return take(sizes[t])

    assert take("I") == 0x46554747 and take("I") == 3
    n_tensors, n_kv = take("Q"), take("Q")
    align = 32
    for _ in range(n_kv):
        key = string()
        v = value(take("I"))
        if key == b"general.alignment":
            align = v
    infos = {}
    for _ in range(n_tensors):
        name = string().decode()
        ne = [take("Q") for _ in range(take("I"))]
        infos[name] = (ne, take("I"), take("Q"))
    start = (pos + align - 1) // align * align
    return data, start, infos


def main():
    data, start, infos = read_gguf(sys.argv[1])
    ne, t, off = infos["src"]
    assert t == 0
    n = int(np.prod(ne))
    src = np.frombuffer(data, dtype="<f4", count=n, offset=start + off)
    ne_q, t_q, off_q = infos["x"]
    assert t_q == 8 and ne_q == ne
    blocks = n // 32
    got = np.frombuffer(data, dtype=np.uint8, count=blocks * 34, offset=start + off_q).reshape(blocks, 34)
    x = src.reshape(blocks, 32).astype(np.float32)
    amax = np.max(np.abs(x), axis=1).astype(np.float32)
    d = (amax / np.float32(127)).astype(np.float32)
    with np.errstate(divide="ignore"):
        inv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
    v = (x * inv[:, None]).astype(np.float32)  # one f32 product, as in C
    # roundf: half away from zero, exact in f64 for any f32 value.
    q = (np.sign(v.astype(np.float64)) * np.floor(np.abs(v.astype(np.float64)) + 0.5)).astype(np.int8)
    want = np.zeros((blocks, 34), dtype=np.uint8)
    want[:, 0:2] = d.astype(np.float16).view(np.uint8).reshape(blocks, 2)
    want[:, 2:] = q.view(np.uint8)
    equal = int(np.sum(np.all(want == got, axis=1)))
    print(f"blocks equal: {equal} of {blocks}")
    sys.exit(0 if equal == blocks else 1)


main()
