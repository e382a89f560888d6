"""Pieces of the generated C API that the CPU writer (codegen/cwriter.py) and the GPU writer (codegen/gpu_host.py)
both emit: the status codes and their messages, the dtype codes, the I/O descriptor tables, run's parameters,
and init's checks of the weights blob (magic, format version, size, CRC-32)."""

from __future__ import annotations

from pt2c.codegen.escape import c_string
from pt2c.ir import DTYPE_CODES, Graph, ctype
from pt2c.sym import hint

HEADER_BYTES = 64  # the weights blob's header
WEIGHTS_FORMAT_VERSION = 1

# status codes of the C API (suffixes; the header prefixes them with the model name)
STATUS = [
    ("OK", "ok"),
    ("ERR_NULL_ARG", "a required pointer argument is NULL"),
    ("ERR_ALIGN", "the workspace (or weights) pointer is not 64-byte (16-byte) aligned"),
    ("ERR_WEIGHTS_TRUNCATED", "the weights blob is shorter than its header says (truncated file?)"),
    ("ERR_WEIGHTS_MAGIC", "the weights blob does not start with the pt2c magic (not a pt2c weights file)"),
    ("ERR_WEIGHTS_VERSION", "the weights blob has a format version this code does not read"),
    ("ERR_WEIGHTS_MISMATCH", "the weights blob belongs to a different compile of the model (hash and size differ from what this code expects)"),
    ("ERR_WEIGHTS_CORRUPT", "the weights blob's contents do not match its own checksum (corrupted file)"),
    ("ERR_NOT_INITIALIZED", "the context was not initialized by a successful init call"),
    ("ERR_INDEX", "an index input is out of range for the tensor it indexes"),
    ("ERR_WORKSPACE_PLAN", "internal error: a kernel needs more scratch than pt2c planned (please report this bug)"),
    # the C message is PT2C_CPU_MSG (names the instruction set the library was compiled for); see _CPU_CHECK
    ("ERR_CPU_UNSUPPORTED", "this library was built for an x86 instruction set the CPU lacks; rebuild for a lower --target"),
    ("ERR_WORKSPACE_SIZE", "the workspace is smaller than the model needs (<NAME>_WORKSPACE_BYTES, <name>_workspace_size())"),
    ("ERR_SIGNATURE", "the header this program was compiled with belongs to a different compile of the model than the "
                      "library (signature mismatch): rebuild the program against the library's own header"),
    ("ERR_CUSTOM_OP", "a user kernel of a custom op returned an error (custom_ops/)"),
    # GPU artifacts (--target cuda / opencl); <name>_last_error(ctx) has the driver's own words
    ("ERR_NO_DEVICE", "no GPU device or driver was found (CUDA: no device or driver; OpenCL: no platform or device)"),
    ("ERR_DEVICE", "a GPU driver call failed (see <name>_last_error)"),
    ("ERR_DEVICE_MEMORY", "the GPU has not enough free memory for the model (<name>_device_memory_size() bytes)"),
    ("ERR_NO_KERNEL_IMAGE", "the library holds no code for this GPU's architecture (and no PTX the driver can compile): "
                            "rebuild with the GPU's sm_XX in --target cuda:..."),
    ("ERR_KERNEL_BUILD", "the OpenCL driver could not compile the model's kernels (the build log: <name>_last_error)"),
    ("ERR_SIZE", "a size is outside the range the model was compiled for, or breaks a relation between sizes "
                 "the export requires (<name>_sizes() lists each size and its range)"),
]


def _crc_table() -> str:
    rows = []
    for i in range(256):
        r = i
        for _ in range(8):
            r = (0xEDB88320 ^ (r >> 1)) if r & 1 else r >> 1
        rows.append(f"0x{r:08x}u")
    return "\n".join("    " + ", ".join(rows[i:i + 8]) + "," for i in range(0, 256, 8))


_CRC_TABLE = _crc_table()  # in read-only data: no 1 KiB table on the stack (freestanding targets)


def status_enum(N: str) -> str:
    """The rows of the header's status enum (<NAME>_OK = 0, ...)."""
    return "\n".join(f"    {N}_{s} = {i}," for i, (s, _) in enumerate(STATUS))


def dtype_enum(N: str) -> str:
    return "\n".join(f"    {N}_DTYPE_{d.upper()} = {c}," for d, c in DTYPE_CODES.items())


def typed_params(g: Graph, in_names: list[str], out_names: list[str]) -> str:
    """The typed pointer parameters of <name>_run."""
    return ", ".join([f"const {ctype(v.dtype)} *{n}" for n, v in zip(in_names, g.inputs)]
                     + [f"{ctype(v.dtype)} *{n}" for n, v in zip(out_names, g.outputs)])


def io_doc(g: Graph, in_names: list[str], out_names: list[str]) -> str:
    return "\n".join([f" *   input  {n}: {v.dtype}{list(v.shape)}" for n, v in zip(in_names, g.inputs)]
                     + [f" *   output {n}: {v.dtype}{list(v.shape)}" for n, v in zip(out_names, g.outputs)])


def io_tables(g: Graph, name: str, in_names: list[str], out_names: list[str]) -> str:
    """The C definitions of the I/O descriptor tables inputs_desc / outputs_desc (with their shape arrays)."""
    N = name.upper()
    descs = []
    for kind, names, vals in (("inputs", in_names, g.inputs), ("outputs", out_names, g.outputs)):
        # (a dynamic model's: at the example's sizes, which init sets)
        shapes = "\n".join(f"static const int64_t {kind}_shape_{i}[] = {{{', '.join(str(hint(n)) for n in v.shape) or '1'}}};"
                           for i, v in enumerate(vals))
        rows = ",\n".join(f'    {{{c_string(n)}, {N}_DTYPE_{v.dtype.upper()}, {len(v.shape)}, {kind}_shape_{i}, {hint(v.nbytes)}u}}'
                          for i, (n, v) in enumerate(zip(names, vals)))
        rows = rows or "    {NULL, 0, 0, NULL, 0u}"  # C99 has no empty arrays; the count macro says 0
        descs.append(f"{shapes}\nstatic const {name}_tensor_desc {kind}_desc[] = {{\n{rows}\n}};")
    return "\n\n".join(descs)


def status_messages(name: str, cpu_msg: bool = True) -> str:
    """The rows of the status_messages array (ERR_CPU_UNSUPPORTED: the PT2C_CPU_MSG macro when cpu_msg)."""
    N = name.upper()
    return ",\n".join("    PT2C_CPU_MSG" if code == "ERR_CPU_UNSUPPORTED" and cpu_msg
                       else "    " + c_string(msg.replace("<NAME>", N).replace("<name>", name)) for code, msg in STATUS)


WEIGHTS_HELPERS_C = r"""static uint64_t read_le(const unsigned char *p, int n)
{
    uint64_t v = 0;
    int i;
    for (i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* CRC-32 (zlib's polynomial 0xEDB88320), the checksum pt2c writes into the blob header. */
static const uint32_t crc_table[256] = {
@TABLE@
};

static uint32_t crc32_of(const unsigned char *p, size_t n)
{
    uint32_t c = 0xFFFFFFFFu;
    size_t j;
    for (j = 0; j < n; j++) c = crc_table[(c ^ p[j]) & 0xFFu] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}
"""


def weights_helpers() -> str:
    """The C helpers weights_check's statements call (read_le, crc32_of)."""
    return WEIGHTS_HELPERS_C.replace("@TABLE@", _CRC_TABLE)


def weights_check(N: str) -> str:
    """The C statements of an init that check the weights blob `blob` of `weights_size` bytes against the
    compile (expected_data_bytes, expected_crc32); they use `data_bytes` and `i` and return <N>_ERR_WEIGHTS_*."""
    return f"""    if (weights_size < {HEADER_BYTES}) return {N}_ERR_WEIGHTS_TRUNCATED;
    if (memcmp(blob, "PT2CWGT", 8) != 0) return {N}_ERR_WEIGHTS_MAGIC;
    if (read_le(blob + 8, 4) != {WEIGHTS_FORMAT_VERSION}u || read_le(blob + 12, 4) != {HEADER_BYTES}u) return {N}_ERR_WEIGHTS_VERSION;
    for (i = 32; i < {HEADER_BYTES}; i++) /* reserved: zero in this format version */
        if (blob[i] != 0) return {N}_ERR_WEIGHTS_VERSION;
    data_bytes = read_le(blob + 16, 8);
    if (data_bytes != expected_data_bytes || read_le(blob + 24, 8) != expected_crc32) return {N}_ERR_WEIGHTS_MISMATCH;
    if (weights_size - {HEADER_BYTES} < data_bytes) return {N}_ERR_WEIGHTS_TRUNCATED;
    if (crc32_of(blob + {HEADER_BYTES}, (size_t)data_bytes) != expected_crc32) return {N}_ERR_WEIGHTS_CORRUPT;"""
