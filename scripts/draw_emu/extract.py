"""Writes the device helpers draw.cu calls (from kernels/sample.cu and ops.cu) to the file named
first, for the host emulation (main.cpp includes it)."""
import re,sys
import pathlib
root=pathlib.Path(__file__).resolve().parents[2]
k=root/'crates/cuda/kernels'
src=(k/'sample.cu').read_text()+(k/'ops.cu').read_text()
names=['sample_finite','sample_scaled','sample_philox','sample_race_margin','sample_block_max','sample_rank_key','argmax_take','warp_argmax']
out=[]
for l in src.splitlines():
    if re.match(r'#define (SQ_WORDS|SQ_GUMBEL_BOUND)\b', l): out.append(l)
for n in names:
    m=re.search(r'^__device__ __forceinline__ [^\n]*\b'+n+r'\(', src, re.M)
    assert m, n
    i=m.start()
    # one-liners end at '}' on the same line
    line_end=src.index('\n',i)
    if src[i:line_end].rstrip().endswith('}'):
        out.append(src[i:line_end]); continue
    j=src.index('\n}\n',i)
    out.append(src[i:j+2])
open(sys.argv[1],'w').write('\n'.join(out)+'\n')
