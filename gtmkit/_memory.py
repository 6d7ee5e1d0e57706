"""Memory helpers for numba kernels: a software prefetch.

A plain load that misses the caches holds the head of the reorder buffer until its line arrives, so a
loop of GTM tests (each a chain of misses into tables of hundreds of MB) keeps only a few misses in
flight. A prefetch instruction retires at once: a batch can request every line it will need before it
reads any of them."""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic


@intrinsic
def prefetch(typingctx, arr, index):
    """Ask for the cache line of element `index` of arr in memory order (a C-contiguous array of any rank:
    row i of a 2-D array starts at i * arr.shape[1]; other layouts: nothing); read, kept in all levels. No
    effect on the results, and none at all for an out-of-range index (a prefetch never faults)."""
    if not (isinstance(arr, types.Array) and isinstance(index, types.Integer)):
        return None
    sig = types.void(arr, index)
    if arr.layout != "C":  # a strided view: no flat element order to speak of, so nothing is asked for
        return sig, lambda context, builder, signature, args: context.get_dummy_value()

    def codegen(context, builder, signature, args):
        aryty, _ = signature.args
        ary = context.make_array(aryty)(context, builder, args[0])
        ptr = builder.gep(ary.data, [args[1]])  # no bounds check needed (see above)
        i8p = ir.IntType(8).as_pointer()
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [i8p] + [ir.IntType(32)] * 3),
                                            "llvm.prefetch.p0")
        builder.call(fn, [builder.bitcast(ptr, i8p), ir.Constant(ir.IntType(32), 0), ir.Constant(ir.IntType(32), 3),
                          ir.Constant(ir.IntType(32), 1)])
        return context.get_dummy_value()

    return sig, codegen
