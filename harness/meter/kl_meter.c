/* kl_meter: the timing loop and the output capture of a sandbox, compiled and loaded before any
 * candidate code runs (harness/meter/__init__.py builds it; docs/integrity.md says why).
 *
 * Everything in a candidate's process is the candidate's: module attributes, classes, frames,
 * function code. So what measures a forward there is this C code, which holds its own references
 * to torch's C builtins (taken by `bind`, once, before the candidate is imported), reads the
 * trusted side's GO frames from the sandbox's socket, times each call with CLOCK_MONOTONIC (CPU) or
 * CUDA events around the call followed by a device-wide synchronisation (CUDA), copies the output
 * into a capture buffer of its own before answering, and writes its DONE frame straight to the
 * socket. Which calls are audited is decided by the trusted side after their DONE arrived; an
 * audited capture leaves as a sealed memfd (immutable once sent) through SCM_RIGHTS.
 *
 * No torch headers: only Python's C API, and the CUDA driver API through dlopen (libcuda.so.1),
 * so the build takes a second and needs no toolkit.
 *
 * Frames (after the channel's 4-byte big-endian length), native byte order:
 *   GO    "KLGO" u32 flags, u64 call, u64 input_seed, u64 forward_seed, u64 nonce, u32 set, u32 pad
 *   DONE  "KLDN" u32 status, u64 call, u64 nonce, f64 sample_ms, then a UTF-8 message (status != 0)
 *   AUDIT "KLAU" u32 0, u64 call, u64 bytes, then a JSON description; the memfd rides along
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#ifndef MFD_ALLOW_SEALING
#define MFD_ALLOW_SEALING 0x0002U
#endif
#ifndef F_ADD_SEALS
#define F_ADD_SEALS 1033
#define F_SEAL_SEAL 0x0001
#define F_SEAL_SHRINK 0x0002
#define F_SEAL_GROW 0x0004
#define F_SEAL_WRITE 0x0008
#endif

enum { GO_AUDIT = 1, GO_STOP = 2, GO_SEED_FORWARD = 4 };
enum {
    DONE_OK = 0,
    DONE_FORWARD_RAISED = 1,
    DONE_BAD_OUTPUT = 2,
    DONE_TF32 = 3,
    DONE_INTERNAL = 4,
    DONE_BAD_FRAME = 5,
};
#define GO_BYTES 48
#define MAX_FRAME (1 << 20)
#define MAX_OUTPUTS 64

/* ---- what `bind` took, before any candidate code ran ---------------------------------------- */
static int bound = 0;
static PyObject *tensor_type;      /* torch.Tensor: outputs must be exactly this type */
static PyObject *fn_empty_like;    /* torch.empty_like */
static PyObject *fn_empty;         /* torch.empty */
static PyObject *fn_mul;           /* torch.mul */
static PyObject *fn_set_grad;      /* torch._C._set_grad_enabled */
static PyObject *fn_is_grad;       /* torch.is_grad_enabled */
static PyObject *m_uniform;        /* TensorBase.uniform_ */
static PyObject *m_copy;           /* TensorBase.copy_ */
static PyObject *m_cpu;            /* TensorBase.cpu */
static PyObject *m_contiguous;     /* TensorBase.contiguous */
static PyObject *m_data_ptr;       /* TensorBase.data_ptr */
static PyObject *m_numel;          /* TensorBase.numel */
static PyObject *m_element_size;   /* TensorBase.element_size */
static PyObject *m_is_floating;    /* TensorBase.is_floating_point */
static PyObject *m_manual_seed;    /* torch._C.Generator.manual_seed */
static PyObject *d_shape;          /* TensorBase.shape (a getset descriptor) */
static PyObject *d_dtype;          /* TensorBase.dtype */
static PyObject *d_device;         /* TensorBase.device */
static PyObject *float32;          /* torch.float32 */
static PyObject *tf32_probes;      /* list of (callable, args): the reduced-precision switches */
static PyObject *tf32_off_state;   /* their values when bound (TF32 off) */
static PyObject *guarded;          /* list of (name, holder, attribute, object, code) */

/* ---- the CUDA driver API, loaded on demand ------------------------------------------------- */
typedef int (*cu_event_create_t)(void **, unsigned int);
typedef int (*cu_event_record_t)(void *, void *);
typedef int (*cu_event_elapsed_t)(float *, void *, void *);
typedef int (*cu_void_t)(void);
typedef int (*cu_memset32_t)(unsigned long long, unsigned int, size_t, void *);
typedef int (*cu_event_destroy_t)(void *);
typedef int (*cu_set_limit_t)(int, size_t);
static cu_event_create_t cu_event_create;
static cu_event_record_t cu_event_record;
static cu_event_elapsed_t cu_event_elapsed;
static cu_void_t cu_ctx_synchronize;
static cu_void_t cu_reset_persisting_l2;
static cu_memset32_t cu_memset32_async;
static cu_event_destroy_t cu_event_destroy;
static cu_set_limit_t cu_ctx_set_limit;
/* CU_LIMIT_PERSISTING_L2_CACHE_SIZE */
#define LIMIT_PERSISTING_L2 0x06

static int load_cuda(void) {
    if (cu_event_record != NULL) return 0;
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        PyErr_Format(PyExc_RuntimeError, "cannot load libcuda.so.1: %s", dlerror());
        return -1;
    }
    cu_event_create = (cu_event_create_t)dlsym(lib, "cuEventCreate");
    cu_event_record = (cu_event_record_t)dlsym(lib, "cuEventRecord");
    cu_event_elapsed = (cu_event_elapsed_t)dlsym(lib, "cuEventElapsedTime_v2");
    if (cu_event_elapsed == NULL) cu_event_elapsed = (cu_event_elapsed_t)dlsym(lib, "cuEventElapsedTime");
    cu_ctx_synchronize = (cu_void_t)dlsym(lib, "cuCtxSynchronize");
    /* Absent before CUDA 11: then there is no persisting L2 to reset either. */
    cu_reset_persisting_l2 = (cu_void_t)dlsym(lib, "cuCtxResetPersistingL2Cache");
    cu_memset32_async = (cu_memset32_t)dlsym(lib, "cuMemsetD32Async");
    cu_event_destroy = (cu_event_destroy_t)dlsym(lib, "cuEventDestroy_v2");
    if (cu_event_destroy == NULL) cu_event_destroy = (cu_event_destroy_t)dlsym(lib, "cuEventDestroy");
    cu_ctx_set_limit = (cu_set_limit_t)dlsym(lib, "cuCtxSetLimit");
    if (!cu_event_create || !cu_event_record || !cu_event_elapsed || !cu_ctx_synchronize || !cu_memset32_async ||
        !cu_event_destroy) {
        cu_event_record = NULL;
        PyErr_SetString(PyExc_RuntimeError, "libcuda.so.1 lacks the event, memset or synchronize entry points");
        return -1;
    }
    return 0;
}

/* ---- socket I/O ---------------------------------------------------------------------------- */
static int wait_fd(int fd, short events) {
    struct pollfd p = {fd, events, 0};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    do {
        rc = poll(&p, 1, -1);
    } while (rc < 0 && errno == EINTR);
    Py_END_ALLOW_THREADS
    return rc < 0 ? -1 : 0;
}

/* The socket I/O runs without the GIL: a driver in this process (harness.sandboxed.localmeter) needs it. */
static int read_exact(int fd, void *buf, size_t n) {
    char *p = buf;
    while (n > 0) {
        ssize_t got;
        Py_BEGIN_ALLOW_THREADS
        got = read(fd, p, n);
        Py_END_ALLOW_THREADS
        if (got > 0) {
            p += got;
            n -= (size_t)got;
        } else if (got == 0) {
            return -1; /* the trusted side closed the channel */
        } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
            if (wait_fd(fd, POLLIN) < 0) return -1;
        } else if (errno != EINTR) {
            return -1;
        }
    }
    return 0;
}

static int write_all(int fd, const void *buf, size_t n) {
    const char *p = buf;
    while (n > 0) {
        ssize_t put;
        Py_BEGIN_ALLOW_THREADS
        put = send(fd, p, n, MSG_NOSIGNAL);
        Py_END_ALLOW_THREADS
        if (put > 0) {
            p += put;
            n -= (size_t)put;
        } else if (put < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (wait_fd(fd, POLLOUT) < 0) return -1;
        } else if (put < 0 && errno != EINTR) {
            return -1;
        }
    }
    return 0;
}

/* One frame: the channel's length prefix, then the payload; ``pass_fd`` >= 0 rides along. */
static int send_frame(int fd, const void *head, size_t head_len, const void *tail, size_t tail_len, int pass_fd) {
    size_t total = head_len + tail_len;
    unsigned char prefix[4] = {(unsigned char)(total >> 24), (unsigned char)(total >> 16),
                               (unsigned char)(total >> 8), (unsigned char)total};
    if (pass_fd >= 0) {
        /* The descriptor goes with the prefix's bytes: the receiver reads them with recvmsg. */
        struct iovec iov = {prefix, sizeof prefix};
        char control[CMSG_SPACE(sizeof(int))];
        memset(control, 0, sizeof control);
        struct msghdr msg;
        memset(&msg, 0, sizeof msg);
        msg.msg_iov = &iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control;
        msg.msg_controllen = sizeof control;
        struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
        ssize_t rc;
        for (;;) {
            Py_BEGIN_ALLOW_THREADS
            rc = sendmsg(fd, &msg, MSG_NOSIGNAL);
            Py_END_ALLOW_THREADS
            if (rc >= 0) break;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                if (wait_fd(fd, POLLOUT) < 0) return -1;
            } else if (errno != EINTR) {
                return -1;
            }
        }
        if ((size_t)rc < sizeof prefix && write_all(fd, prefix + rc, sizeof prefix - (size_t)rc) < 0) return -1;
    } else if (write_all(fd, prefix, sizeof prefix) < 0) {
        return -1;
    }
    if (write_all(fd, head, head_len) < 0) return -1;
    if (tail_len && write_all(fd, tail, tail_len) < 0) return -1;
    return 0;
}

typedef struct {
    char magic[4];
    uint32_t status;
    uint64_t call;
    uint64_t nonce;
    double sample_ms;
} done_frame;

typedef struct {
    char magic[4];
    uint32_t zero;
    uint64_t call;
    uint64_t bytes;
} audit_frame;

static int send_done(int fd, uint32_t status, uint64_t call, uint64_t nonce, double sample_ms, const char *message) {
    done_frame d;
    memcpy(d.magic, "KLDN", 4);
    d.status = status;
    d.call = call;
    d.nonce = nonce;
    d.sample_ms = sample_ms;
    size_t len = message ? strlen(message) : 0;
    if (len > 4000) len = 4000;
    return send_frame(fd, &d, sizeof d, message, len, -1);
}

/* ---- small helpers on tensors, through the bound builtins only ------------------------------ */
static PyObject *getset(PyObject *descr, PyObject *obj) {
    descrgetfunc get = Py_TYPE(descr)->tp_descr_get;
    if (get == NULL) {
        PyErr_SetString(PyExc_TypeError, "not a descriptor");
        return NULL;
    }
    return get(descr, obj, (PyObject *)Py_TYPE(obj));
}

static long long as_ll(PyObject *method, PyObject *tensor) {
    PyObject *v = PyObject_CallOneArg(method, tensor);
    if (v == NULL) return -1;
    long long x = PyLong_AsLongLong(v);
    Py_DECREF(v);
    return x;
}

/* The output as a new list of tensors, each exactly a torch.Tensor (no subclass, no proxy), or
 * NULL with ``why`` set. ``single`` says whether forward returned one tensor. */
static PyObject *output_tensors(PyObject *out, int *single, char *why, size_t why_len) {
    if (Py_TYPE(out) == (PyTypeObject *)tensor_type) {
        *single = 1;
        PyObject *one = PyList_New(1);
        if (one != NULL) PyList_SET_ITEM(one, 0, Py_NewRef(out));
        return one;
    }
    *single = 0;
    if (!PyTuple_CheckExact(out) && !PyList_CheckExact(out)) {
        snprintf(why, why_len, "forward returned %.100s; the timed output must be a torch.Tensor (or a tuple or list "
                 "of them) of the plain type, computed when forward returns", Py_TYPE(out)->tp_name);
        return NULL;
    }
    PyObject *seq = PySequence_List(out);
    if (seq == NULL) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(seq);
    if (n == 0 || n > MAX_OUTPUTS) {
        snprintf(why, why_len, "forward returned a sequence of %zd items", n);
        Py_DECREF(seq);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *t = PyList_GET_ITEM(seq, i);
        if (Py_TYPE(t) != (PyTypeObject *)tensor_type) {
            snprintf(why, why_len, "forward's output %zd is %.100s, not a plain torch.Tensor", i, Py_TYPE(t)->tp_name);
            Py_DECREF(seq);
            return NULL;
        }
    }
    return seq;
}

/* 0 while every reduced-precision switch is as `bind` found it (TF32 off); 1 if one changed. */
static int tf32_changed(void) {
    Py_ssize_t n = PyList_GET_SIZE(tf32_probes);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *probe = PyList_GET_ITEM(tf32_probes, i);
        PyObject *value = PyObject_Call(PyTuple_GET_ITEM(probe, 0), PyTuple_GET_ITEM(probe, 1), NULL);
        if (value == NULL) {
            PyErr_Clear();
            value = Py_NewRef(Py_None); /* torch refuses to answer once the two APIs were mixed */
        }
        int same = PyObject_RichCompareBool(value, PyList_GET_ITEM(tf32_off_state, i), Py_EQ);
        Py_DECREF(value);
        if (same != 1) {
            PyErr_Clear();
            return 1;
        }
    }
    return 0;
}

/* ---- the loop ------------------------------------------------------------------------------- */
typedef struct {
    int fd;
    PyObject *fn;        /* the forward (the candidate's model) */
    PyObject *buffers;   /* list: the call's arguments, written in place before each call */
    PyObject *sets;      /* list of lists: the input sets the trusted side rotates */
    PyObject *generator; /* a torch.Generator on the device, for the per-call factors */
    PyObject *forward_generators; /* list: generators seeded before a RANDOM problem's forward */
    PyObject *device;
    int cuda;
    void *stream;
    unsigned long long flush_ptr;
    size_t flush_words;
    void *start_event;   /* the timed window's events, made once per run */
    void *end_event;
    PyObject *capture;   /* list of our own tensors: the last call's output, copied */
    int capture_single;
    uint64_t capture_call;
    int have_capture;
} loop_state;

/* Write input set ``set`` into the buffers as call ``seed`` sees it: each floating tensor times
 * factors drawn uniformly in [0.95, 1.05) per element (unknown before the GO frame arrives, so
 * nothing can be computed ahead; per element, so no output of an earlier call scales into this
 * one's), the rest copied. The comparer repeats exactly these ops (harness.sandboxed.meter.call_inputs). */
static int load_inputs(loop_state *s, Py_ssize_t set, uint64_t seed) {
    PyObject *source = PyList_GET_ITEM(s->sets, set);
    PyObject *r = PyObject_CallFunction(m_manual_seed, "OK", s->generator, (unsigned long long)seed);
    if (r == NULL) return -1;
    Py_DECREF(r);
    Py_ssize_t n = PyList_GET_SIZE(s->buffers);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *buf = PyList_GET_ITEM(s->buffers, i);
        PyObject *src = PyList_GET_ITEM(source, i);
        if (Py_TYPE(buf) != (PyTypeObject *)tensor_type) continue;
        PyObject *floating = PyObject_CallOneArg(m_is_floating, buf);
        if (floating == NULL) return -1;
        int is_float = PyObject_IsTrue(floating);
        Py_DECREF(floating);
        if (!is_float) {
            r = PyObject_CallFunctionObjArgs(m_copy, buf, src, NULL);
            if (r == NULL) return -1;
            Py_DECREF(r);
            continue;
        }
        PyObject *args = PyTuple_Pack(1, src);
        PyObject *kw = Py_BuildValue("{s:O}", "dtype", float32);
        PyObject *factors = (args && kw) ? PyObject_Call(fn_empty_like, args, kw) : NULL;
        Py_XDECREF(args);
        Py_XDECREF(kw);
        if (factors == NULL) return -1;
        kw = Py_BuildValue("{s:O}", "generator", s->generator);
        PyObject *uargs = Py_BuildValue("(Odd)", factors, 0.95, 1.05);
        r = (kw && uargs) ? PyObject_Call(m_uniform, uargs, kw) : NULL;
        Py_XDECREF(kw);
        Py_XDECREF(uargs);
        if (r == NULL) {
            Py_DECREF(factors);
            return -1;
        }
        Py_DECREF(r);
        kw = Py_BuildValue("{s:O}", "out", buf);
        PyObject *margs = PyTuple_Pack(2, src, factors);
        r = (kw && margs) ? PyObject_Call(fn_mul, margs, kw) : NULL;
        Py_XDECREF(kw);
        Py_XDECREF(margs);
        Py_DECREF(factors);
        if (r == NULL) return -1;
        Py_DECREF(r);
    }
    return 0;
}

static int seed_forward(loop_state *s, uint64_t seed) {
    Py_ssize_t n = PyList_GET_SIZE(s->forward_generators);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *r = PyObject_CallFunction(m_manual_seed, "OK", PyList_GET_ITEM(s->forward_generators, i),
                                            (unsigned long long)seed);
        if (r == NULL) return -1;
        Py_DECREF(r);
    }
    return 0;
}

/* Copy the output into the capture buffers (reallocated when the shape or dtype changes). */
static int capture_output(loop_state *s, PyObject *tensors, int single, uint64_t call) {
    Py_ssize_t n = PyList_GET_SIZE(tensors);
    int fresh = s->capture == NULL || PyList_GET_SIZE(s->capture) != n;
    for (Py_ssize_t i = 0; !fresh && i < n; i++) {
        PyObject *a = PyList_GET_ITEM(tensors, i), *b = PyList_GET_ITEM(s->capture, i);
        PyObject *sa = getset(d_shape, a), *sb = getset(d_shape, b);
        PyObject *ta = getset(d_dtype, a), *tb = getset(d_dtype, b);
        PyObject *va = getset(d_device, a), *vb = getset(d_device, b);
        if (!sa || !sb || !ta || !tb || !va || !vb) {
            Py_XDECREF(sa); Py_XDECREF(sb); Py_XDECREF(ta); Py_XDECREF(tb); Py_XDECREF(va); Py_XDECREF(vb);
            return -1;
        }
        fresh = PyObject_RichCompareBool(sa, sb, Py_NE) == 1 || ta != tb ||
                PyObject_RichCompareBool(va, vb, Py_NE) == 1;
        Py_DECREF(sa); Py_DECREF(sb); Py_DECREF(ta); Py_DECREF(tb); Py_DECREF(va); Py_DECREF(vb);
    }
    if (fresh) {
        PyObject *capture = PyList_New(n);
        if (capture == NULL) return -1;
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *t = PyList_GET_ITEM(tensors, i);
            PyObject *shape = getset(d_shape, t), *dtype = getset(d_dtype, t), *device = getset(d_device, t);
            PyObject *args = shape ? PyTuple_Pack(1, shape) : NULL;
            PyObject *kw = (dtype && device) ? Py_BuildValue("{s:O,s:O}", "dtype", dtype, "device", device) : NULL;
            PyObject *slot = (args && kw) ? PyObject_Call(fn_empty, args, kw) : NULL;
            Py_XDECREF(shape); Py_XDECREF(dtype); Py_XDECREF(device); Py_XDECREF(args); Py_XDECREF(kw);
            if (slot == NULL) {
                Py_DECREF(capture);
                return -1;
            }
            PyList_SET_ITEM(capture, i, slot);
        }
        Py_XSETREF(s->capture, capture);
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *r = PyObject_CallFunctionObjArgs(m_copy, PyList_GET_ITEM(s->capture, i),
                                                   PyList_GET_ITEM(tensors, i), NULL);
        if (r == NULL) return -1;
        Py_DECREF(r);
    }
    if (s->cuda && cu_ctx_synchronize() != 0) {
        PyErr_SetString(PyExc_RuntimeError, "cuCtxSynchronize failed after the capture");
        return -1;
    }
    s->capture_single = single;
    s->capture_call = call;
    s->have_capture = 1;
    return 0;
}

/* The capture's bytes in a sealed memfd, sent with its description (AUDIT frame). */
static int send_audit(loop_state *s) {
    if (!s->have_capture) {
        return send_done(s->fd, DONE_BAD_FRAME, 0, 0, 0.0, "an audit before any call");
    }
    int mfd = (int)syscall(SYS_memfd_create, "kl-audit", MFD_ALLOW_SEALING);
    if (mfd < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    Py_ssize_t n = PyList_GET_SIZE(s->capture);
    char desc[16384];
    size_t used = (size_t)snprintf(desc, sizeof desc, "{\"single\": %s, \"tensors\": [", s->capture_single ? "true" : "false");
    unsigned long long total = 0;
    int rc = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *slot = PyList_GET_ITEM(s->capture, i);
        PyObject *device = getset(d_device, slot);
        PyObject *device_s = device ? PyObject_Str(device) : NULL;
        const char *where = device_s ? PyUnicode_AsUTF8(device_s) : NULL;
        int on_cuda = where != NULL && strncmp(where, "cuda", 4) == 0;
        Py_XDECREF(device);
        Py_XDECREF(device_s);
        PyObject *host = PyObject_CallOneArg(m_cpu, slot);
        PyObject *flat = host ? PyObject_CallOneArg(m_contiguous, host) : NULL;
        Py_XDECREF(host);
        if (flat == NULL) goto out;
        long long ptr = as_ll(m_data_ptr, flat), numel = as_ll(m_numel, flat), size = as_ll(m_element_size, flat);
        PyObject *dtype = getset(d_dtype, flat), *shape = getset(d_shape, flat);
        PyObject *dtype_s = dtype ? PyObject_Str(dtype) : NULL;
        PyObject *shape_l = shape ? PySequence_List(shape) : NULL;
        PyObject *shape_s = shape_l ? PyObject_Repr(shape_l) : NULL;
        const char *ds = dtype_s ? PyUnicode_AsUTF8(dtype_s) : NULL;
        const char *ss = shape_s ? PyUnicode_AsUTF8(shape_s) : NULL;
        int ok = ptr >= 0 && numel >= 0 && size > 0 && ds && ss;
        if (ok) {
            if (strncmp(ds, "torch.", 6) == 0) ds += 6;
            used += (size_t)snprintf(desc + used, used < sizeof desc ? sizeof desc - used : 0,
                                     "%s{\"dtype\": \"%s\", \"shape\": %s, \"device\": \"%s\"}", i ? ", " : "", ds,
                                     ss, on_cuda ? "cuda" : "cpu");
            size_t bytes = (size_t)numel * (size_t)size;
            const char *p = (const char *)(uintptr_t)ptr;
            while (bytes > 0) {
                ssize_t put = write(mfd, p, bytes);
                if (put < 0 && errno == EINTR) continue;
                if (put <= 0) {
                    ok = 0;
                    PyErr_SetFromErrno(PyExc_OSError);
                    break;
                }
                p += put;
                bytes -= (size_t)put;
            }
            total += (unsigned long long)numel * (unsigned long long)size;
        }
        Py_XDECREF(dtype); Py_XDECREF(shape); Py_XDECREF(dtype_s); Py_XDECREF(shape_l); Py_XDECREF(shape_s);
        Py_DECREF(flat);
        if (!ok) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "cannot describe the captured output");
            goto out;
        }
    }
    used += (size_t)snprintf(desc + used, used < sizeof desc ? sizeof desc - used : 0, "]}");
    if (used >= sizeof desc) {
        PyErr_SetString(PyExc_RuntimeError, "the captured output's description is too long");
        goto out;
    }
    /* Immutable from here on, for everyone: what the comparer reads is what was captured. */
    if (fcntl(mfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        goto out;
    }
    audit_frame a;
    memcpy(a.magic, "KLAU", 4);
    a.zero = 0;
    a.call = s->capture_call;
    a.bytes = total;
    rc = send_frame(s->fd, &a, sizeof a, desc, used, mfd);
    if (rc < 0) PyErr_SetFromErrno(PyExc_OSError);
out:
    close(mfd);
    return rc;
}

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* Persisting L2 lines made normal again, and no L2 set aside for them: done after a call has
 * answered (outside both clocks), so a window the candidate sets lasts one call at most and the
 * next call's flush evicts everything; its cost is nobody's sample. */
static void release_l2(loop_state *s) {
    if (!s->cuda) return;
    if (cu_reset_persisting_l2 != NULL) cu_reset_persisting_l2();
    if (cu_ctx_set_limit != NULL) cu_ctx_set_limit(LIMIT_PERSISTING_L2, 0);
}

/* One call, from its GO frame to its DONE frame. Returns 0, or -1 with a Python error set (ours:
 * the loop ends and the sandbox reports it); a failure of the candidate's is a DONE status, and
 * ``*stop`` says the loop ends after it. */
static int one_call(loop_state *s, PyObject *args, uint32_t flags, uint64_t call, uint64_t input_seed,
                    uint64_t forward_seed, uint64_t nonce, uint32_t set, int *stop) {
    char why[512];
    if (set >= (uint32_t)PyList_GET_SIZE(s->sets)) {
        *stop = 1;
        return send_done(s->fd, DONE_BAD_FRAME, call, nonce, 0.0, "no such input set");
    }
    if (load_inputs(s, (Py_ssize_t)set, input_seed) < 0) return -1;
    if ((flags & GO_SEED_FORWARD) && seed_forward(s, forward_seed) < 0) return -1;
    void *start = s->start_event, *end = s->end_event;
    double t0 = 0.0, sample = 0.0;
    if (s->cuda) {
        /* No synchronisation here: the inputs' writes and the flush, queued on the stream before
         * the start event, keep the device busy while the host goes into forward (a host that
         * waited would leave the device idle inside the timed window for forward's prologue). */
        if (s->flush_words && cu_memset32_async(s->flush_ptr, 0, s->flush_words, s->stream) != 0) {
            PyErr_SetString(PyExc_RuntimeError, "the L2 flush failed");
            return -1;
        }
        cu_event_record(start, s->stream);
    } else {
        t0 = now_ms();
    }
    PyObject *out = PyObject_Call(s->fn, args, NULL);
    if (s->cuda) {
        cu_event_record(end, s->stream);
        /* Device-wide: work the call left on other streams is inside the trusted side's clock. */
        int sync_rc = cu_ctx_synchronize();
        float ms = 0.0f;
        if (sync_rc == 0 && cu_event_elapsed(&ms, start, end) == 0) sample = (double)ms;
        if (sync_rc != 0) {
            Py_XDECREF(out);
            PyErr_Clear();
            *stop = 1;
            return send_done(s->fd, DONE_FORWARD_RAISED, call, nonce, 0.0,
                             "the device failed while forward ran (an illegal memory access or a kernel fault)");
        }
    } else {
        sample = now_ms() - t0;
    }
    if (out == NULL) {
        /* The candidate's exception: its type and message (the sandbox adds nothing of ours). */
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        PyErr_NormalizeException(&type, &value, &tb);
        PyObject *text = value ? PyObject_Str(value) : NULL;
        const char *name = type ? ((PyTypeObject *)type)->tp_name : "exception";
        const char *msg = text ? PyUnicode_AsUTF8(text) : NULL;
        snprintf(why, sizeof why, "forward raised %s: %s", name, msg ? msg : "");
        PyErr_Clear();
        Py_XDECREF(text); Py_XDECREF(type); Py_XDECREF(value); Py_XDECREF(tb);
        *stop = 1;
        return send_done(s->fd, DONE_FORWARD_RAISED, call, nonce, sample, why);
    }
    int single = 0;
    why[0] = 0;
    PyObject *tensors = output_tensors(out, &single, why, sizeof why);
    if (tensors == NULL) {
        Py_DECREF(out);
        if (!why[0]) return -1;
        PyErr_Clear();
        *stop = 1;
        return send_done(s->fd, DONE_BAD_OUTPUT, call, nonce, sample, why);
    }
    int rc = capture_output(s, tensors, single, call);
    Py_DECREF(tensors);
    Py_DECREF(out); /* let the output go before the next call, as a caller that drops it would */
    if (rc < 0) {
        /* A copy that cannot be made: an output on the wrong device, of a shape torch refuses. */
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        PyObject *text = value ? PyObject_Str(value) : NULL;
        const char *msg = text ? PyUnicode_AsUTF8(text) : NULL;
        snprintf(why, sizeof why, "the output could not be captured: %s", msg ? msg : "");
        PyErr_Clear();
        Py_XDECREF(text); Py_XDECREF(type); Py_XDECREF(value); Py_XDECREF(tb);
        *stop = 1;
        return send_done(s->fd, DONE_BAD_OUTPUT, call, nonce, sample, why);
    }
    if (tf32_changed()) {
        *stop = 1;
        return send_done(s->fd, DONE_TF32, call, nonce, sample,
                         "a reduced-precision switch (TF32 or a lower fp32 matmul precision) was turned on");
    }
    return send_done(s->fd, DONE_OK, call, nonce, sample, NULL);
}

typedef struct {
    char magic[4];
    uint32_t flags;
    uint64_t call;
    uint64_t input_seed;
    uint64_t forward_seed;
    uint64_t nonce;
    uint32_t set;
    uint32_t pad;
} go_frame;

/* The next GO frame from the trusted side: 0, or -1 with a Python error set. */
static int read_go(int fd, go_frame *go) {
    unsigned char prefix[4];
    if (read_exact(fd, prefix, 4) < 0) {
        PyErr_SetString(PyExc_ConnectionError, "the trusted side closed the channel");
        return -1;
    }
    uint32_t len = ((uint32_t)prefix[0] << 24) | ((uint32_t)prefix[1] << 16) | ((uint32_t)prefix[2] << 8) | prefix[3];
    if (len != GO_BYTES) {
        PyErr_Format(PyExc_ConnectionError, "a frame of %u bytes where a GO frame was expected", len);
        return -1;
    }
    if (read_exact(fd, go, sizeof *go) < 0 || memcmp(go->magic, "KLGO", 4) != 0) {
        PyErr_SetString(PyExc_ConnectionError, "a malformed GO frame");
        return -1;
    }
    return 0;
}

static PyObject *meter_run(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"fd", "fn", "buffers", "sets", "generator", "forward_generators", "device", "cuda",
                            "stream", "flush_ptr", "flush_words", NULL};
    loop_state s;
    memset(&s, 0, sizeof s);
    unsigned long long stream = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "iOO!O!OO!OpKKn", names, &s.fd, &s.fn, &PyList_Type, &s.buffers,
                                     &PyList_Type, &s.sets, &s.generator, &PyList_Type, &s.forward_generators,
                                     &s.device, &s.cuda, &stream, &s.flush_ptr, &s.flush_words)) {
        return NULL;
    }
    if (!bound) {
        PyErr_SetString(PyExc_RuntimeError, "kl_meter.bind was not called");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(s.sets); i++) {
        PyObject *set = PyList_GET_ITEM(s.sets, i);
        if (!PyList_Check(set) || PyList_GET_SIZE(set) != PyList_GET_SIZE(s.buffers)) {
            PyErr_SetString(PyExc_ValueError, "every input set must be a list as long as the buffers");
            return NULL;
        }
    }
    s.stream = (void *)(uintptr_t)stream;
    if (s.cuda) {
        if (load_cuda() < 0) return NULL;
        if (cu_event_create(&s.start_event, 0) != 0 || cu_event_create(&s.end_event, 0) != 0) {
            PyErr_SetString(PyExc_RuntimeError, "cuEventCreate failed");
            return NULL;
        }
        release_l2(&s);
    }
    PyObject *call_args = PyList_AsTuple(s.buffers);
    if (call_args == NULL) return NULL;
    /* Forward runs without autograd, as the reference's does. */
    PyObject *was = PyObject_CallNoArgs(fn_is_grad);
    PyObject *r = was ? PyObject_CallOneArg(fn_set_grad, Py_False) : NULL;
    Py_XDECREF(r);
    long calls = 0;
    int failed = (r == NULL);
    int stop = 0;
    while (!failed && !stop) {
        go_frame go;
        if (read_go(s.fd, &go) < 0) {
            failed = 1;
            break;
        }
        if (go.flags & GO_AUDIT) {
            if (send_audit(&s) < 0) failed = 1;
            continue;
        }
        if (go.flags & GO_STOP) break;
        if (one_call(&s, call_args, go.flags, go.call, go.input_seed, go.forward_seed, go.nonce, go.set, &stop) < 0) {
            failed = 1;
            break;
        }
        release_l2(&s);
        calls++;
    }
    /* Wait for the STOP (or an audit) after a failure the candidate caused, so the trusted side
     * always ends the conversation. */
    while (!failed && stop) {
        go_frame go;
        if (read_go(s.fd, &go) < 0) {
            failed = 1;
            break;
        }
        if (go.flags & GO_AUDIT) {
            if (send_audit(&s) < 0) failed = 1;
            continue;
        }
        if (go.flags & GO_STOP) break;
        if (send_done(s.fd, DONE_BAD_FRAME, go.call, go.nonce, 0.0, "the loop already ended") < 0) failed = 1;
    }
    if (was != NULL) {
        /* Restore autograd without losing the error that ended the loop, if one did. */
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        PyObject *back = PyObject_CallOneArg(fn_set_grad, was);
        Py_XDECREF(back);
        Py_DECREF(was);
        if (type != NULL) {
            PyErr_Restore(type, value, tb);
        } else if (back == NULL) {
            failed = 1;
        }
    }
    Py_DECREF(call_args);
    Py_XDECREF(s.capture);
    if (s.start_event != NULL) cu_event_destroy(s.start_event);
    if (s.end_event != NULL) cu_event_destroy(s.end_event);
    if (failed) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "the timing loop failed");
        return NULL;
    }
    return PyLong_FromLong(calls);
}

/* ---- bind and the tamper check --------------------------------------------------------------- */
#define TAKE(dict, key, var)                                                          \
    do {                                                                              \
        PyObject *v_ = PyDict_GetItemString(dict, key);                               \
        if (v_ == NULL) {                                                             \
            PyErr_Format(PyExc_KeyError, "kl_meter.bind needs %s", key);             \
            return NULL;                                                              \
        }                                                                             \
        var = Py_NewRef(v_);                                                          \
    } while (0)

static PyObject *meter_bind(PyObject *self, PyObject *arg) {
    if (bound) {
        PyErr_SetString(PyExc_RuntimeError, "kl_meter is bound already");
        return NULL;
    }
    if (!PyDict_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "bind takes a dict");
        return NULL;
    }
    TAKE(arg, "tensor_type", tensor_type);
    TAKE(arg, "empty_like", fn_empty_like);
    TAKE(arg, "empty", fn_empty);
    TAKE(arg, "mul", fn_mul);
    TAKE(arg, "set_grad_enabled", fn_set_grad);
    TAKE(arg, "is_grad_enabled", fn_is_grad);
    TAKE(arg, "uniform_", m_uniform);
    TAKE(arg, "copy_", m_copy);
    TAKE(arg, "cpu", m_cpu);
    TAKE(arg, "contiguous", m_contiguous);
    TAKE(arg, "data_ptr", m_data_ptr);
    TAKE(arg, "numel", m_numel);
    TAKE(arg, "element_size", m_element_size);
    TAKE(arg, "is_floating_point", m_is_floating);
    TAKE(arg, "manual_seed", m_manual_seed);
    TAKE(arg, "shape", d_shape);
    TAKE(arg, "dtype", d_dtype);
    TAKE(arg, "device", d_device);
    TAKE(arg, "float32", float32);
    TAKE(arg, "tf32_probes", tf32_probes);
    TAKE(arg, "guarded", guarded);
    if (!PyList_Check(tf32_probes) || !PyList_Check(guarded)) {
        PyErr_SetString(PyExc_TypeError, "tf32_probes and guarded must be lists");
        return NULL;
    }
    tf32_off_state = PyList_New(0);
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(tf32_probes); i++) {
        PyObject *probe = PyList_GET_ITEM(tf32_probes, i);
        if (!PyTuple_Check(probe) || PyTuple_GET_SIZE(probe) != 2 || !PyTuple_Check(PyTuple_GET_ITEM(probe, 1))) {
            PyErr_SetString(PyExc_TypeError, "a tf32 probe is (callable, args)");
            return NULL;
        }
        PyObject *value = PyObject_Call(PyTuple_GET_ITEM(probe, 0), PyTuple_GET_ITEM(probe, 1), NULL);
        if (value == NULL) {
            PyErr_Clear();
            value = Py_NewRef(Py_None);
        }
        PyList_Append(tf32_off_state, value);
        Py_DECREF(value);
    }
    bound = 1;
    Py_RETURN_NONE;
}

/* Names of the guarded harness objects the candidate changed: an attribute no longer holding the
 * object it held at `bind`, or a function whose code was replaced. */
static PyObject *meter_tampered(PyObject *self, PyObject *unused) {
    PyObject *found = PyList_New(0);
    if (found == NULL || !bound) return found;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(guarded); i++) {
        PyObject *row = PyList_GET_ITEM(guarded, i); /* (name, holder, attribute, object, code|None) */
        if (!PyTuple_Check(row) || PyTuple_GET_SIZE(row) != 5) continue;
        PyObject *name = PyTuple_GET_ITEM(row, 0), *holder = PyTuple_GET_ITEM(row, 1);
        PyObject *attribute = PyTuple_GET_ITEM(row, 2), *object = PyTuple_GET_ITEM(row, 3);
        PyObject *code = PyTuple_GET_ITEM(row, 4);
        int changed = 0;
        PyObject *now = PyObject_GetAttr(holder, attribute);
        if (now == NULL) {
            PyErr_Clear();
            changed = 1;
        } else {
            changed = now != object;
            Py_DECREF(now);
        }
        if (!changed && code != Py_None && PyFunction_Check(object)) {
            changed = PyFunction_GET_CODE(object) != code;
        }
        if (changed) PyList_Append(found, name);
    }
    return found;
}

static PyMethodDef methods[] = {
    {"bind", meter_bind, METH_O, "Take torch's builtins and the guarded objects (once, before candidate code)."},
    {"run", (PyCFunction)(void (*)(void))meter_run, METH_VARARGS | METH_KEYWORDS,
     "The timing loop, driven by the trusted side's GO frames on fd; returns the calls made."},
    {"tampered", meter_tampered, METH_NOARGS, "Names of guarded objects changed since bind."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "kl_meter", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit_kl_meter(void) { return PyModule_Create(&module); }
