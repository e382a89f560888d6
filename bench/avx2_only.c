/* avx2_only.c: an LD_PRELOAD shim that makes the CPU look like an AVX2+FMA machine without
 * AVX-512 or AMX to everything in the process that asks `cpuid` after start-up (ONNX Runtime's
 * MLAS, oneDNN, MKL, PyTorch's cpuinfo, numpy, gcc -march=native, pt2c's multi-versioned init).
 *
 * The machine the benchmark issue was written for is a 2-core AVX2+FMA x86-64 without AVX-512;
 * `bench/compare.py --hide-avx512` uses this shim to time every engine as it would run there
 * when the host it gets has AVX-512.  Linux x86 only, and only on CPUs with CPUID faulting
 * (`cpuid_fault` in /proc/cpuinfo): arch_prctl(ARCH_SET_CPUID, 0) makes `cpuid` trap with
 * SIGSEGV; the handler runs the real `cpuid` (faulting off for that one instruction), clears the
 * AVX-512 / AMX bits, and steps over the instruction.  The setting is per thread, inherited by
 * threads created later, and reset by execve (a preloaded child sets it again).
 *
 *   cc -O2 -shared -fPIC -o avx2_only.so avx2_only.c
 *   LD_PRELOAD=$PWD/avx2_only.so python ...
 *
 * Programs that install their own SIGSEGV handler (gcc's cc1 does) keep it: the shim interposes
 * sigaction()/signal() for SIGSEGV, records the program's handler and passes every fault that
 * is not a `cpuid` on to it.
 *
 * glibc's own string functions pick their variant before any constructor runs; set
 * GLIBC_TUNABLES=glibc.cpu.hwcaps=-AVX512F,... too (compare.py does) for those. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#ifndef ARCH_SET_CPUID
#define ARCH_SET_CPUID 0x1012
#endif

static void set_faulting(int on) { syscall(SYS_arch_prctl, ARCH_SET_CPUID, on ? 0 : 1); }

static void mask(uint32_t leaf, uint32_t sub, uint32_t r[4]) {
    if (leaf == 7 && sub == 0) {
        /* EBX: AVX512F 16, DQ 17, IFMA 21, PF 26, ER 27, CD 28, BW 30, VL 31 */
        r[1] &= ~((1u << 16) | (1u << 17) | (1u << 21) | (1u << 26) | (1u << 27) | (1u << 28) |
                  (1u << 30) | (1u << 31));
        /* ECX: VBMI 1, VBMI2 6, VNNI 11, BITALG 12, VPOPCNTDQ 14 */
        r[2] &= ~((1u << 1) | (1u << 6) | (1u << 11) | (1u << 12) | (1u << 14));
        /* EDX: 4VNNIW 2, 4FMAPS 3, VP2INTERSECT 8, AMX-BF16 22, AVX512-FP16 23, AMX-TILE 24,
         * AMX-INT8 25 */
        r[3] &= ~((1u << 2) | (1u << 3) | (1u << 8) | (1u << 22) | (1u << 23) | (1u << 24) |
                  (1u << 25));
    } else if (leaf == 7 && sub == 1) {
        /* EAX: AVX512-BF16 5, AMX-FP16 21; EDX: AVX10 19, AMX-COMPLEX 8 */
        r[0] &= ~((1u << 5) | (1u << 21));
        r[3] &= ~((1u << 8) | (1u << 19));
    } else if (leaf == 0xD && sub == 0) {
        /* XSAVE state components the CPU supports: drop opmask/ZMM (5-7) and AMX tiles (17-18) */
        r[0] &= ~((7u << 5) | (3u << 17));
    } else if (leaf == 0x1D || leaf == 0x1E || leaf == 0x24) {
        r[0] = r[1] = r[2] = r[3] = 0; /* AMX tile / TMUL and AVX10 information leaves */
    }
}

typedef int (*sigaction_fn)(int, const struct sigaction *, struct sigaction *);
static struct sigaction app_sa; /* the program's own SIGSEGV disposition (SIG_DFL until it sets one) */

static sigaction_fn real_sigaction(void) {
    static sigaction_fn f;
    if (!f) f = (sigaction_fn)dlsym(RTLD_NEXT, "sigaction");
    return f;
}

static void on_segv(int sig, siginfo_t *si, void *uc_) {
    ucontext_t *uc = (ucontext_t *)uc_;
    greg_t *g = uc->uc_mcontext.gregs;
    const unsigned char *ip = (const unsigned char *)g[REG_RIP];
    if (si->si_code == SI_KERNEL && ip[0] == 0x0F && ip[1] == 0xA2) {
        uint32_t leaf = (uint32_t)g[REG_RAX], sub = (uint32_t)g[REG_RCX], r[4];
        set_faulting(0);
        __asm__ volatile("cpuid" : "=a"(r[0]), "=b"(r[1]), "=c"(r[2]), "=d"(r[3]) : "a"(leaf), "c"(sub));
        set_faulting(1);
        mask(leaf, sub, r);
        g[REG_RAX] = r[0];
        g[REG_RBX] = r[1];
        g[REG_RCX] = r[2];
        g[REG_RDX] = r[3];
        g[REG_RIP] += 2;
        return;
    }
    /* a real fault: the program's handler, or the default action (re-fault and die) */
    if (app_sa.sa_flags & SA_SIGINFO) {
        app_sa.sa_sigaction(sig, si, uc_);
    } else if (app_sa.sa_handler == SIG_IGN) {
        return;
    } else if (app_sa.sa_handler != SIG_DFL) {
        app_sa.sa_handler(sig);
    } else {
        struct sigaction dfl;
        memset(&dfl, 0, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        real_sigaction()(sig, &dfl, NULL);
        if (si->si_code == SI_USER || si->si_code == SI_TKILL) raise(sig); /* sent, not a fault */
    }
}

int sigaction(int sig, const struct sigaction *sa, struct sigaction *old) {
    if (sig != SIGSEGV) return real_sigaction()(sig, sa, old);
    if (old) *old = app_sa;
    if (sa) app_sa = *sa;
    return 0;
}

sighandler_t signal(int sig, sighandler_t h) {
    struct sigaction sa, old;
    if (sig != SIGSEGV) {
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = h;
        sa.sa_flags = SA_RESTART;
        return real_sigaction()(sig, &sa, &old) == 0 ? old.sa_handler : SIG_ERR;
    }
    old = app_sa;
    memset(&app_sa, 0, sizeof app_sa);
    app_sa.sa_handler = h;
    return old.sa_handler;
}

__attribute__((constructor)) static void avx2_only_init(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    app_sa.sa_handler = SIG_DFL;
    real_sigaction()(SIGSEGV, &sa, NULL);
    if (syscall(SYS_arch_prctl, ARCH_SET_CPUID, 0) != 0) {
        fprintf(stderr, "avx2_only.so: this CPU/kernel has no CPUID faulting; AVX-512 stays visible\n");
        if (getenv("AVX2_ONLY_STRICT")) abort();
    }
}
