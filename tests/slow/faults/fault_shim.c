/*
 * An LD_PRELOAD shim that makes file I/O fail on demand, for jobledger's fault tests.
 *
 * Built by the tests with gcc into a temporary directory (never committed as a binary):
 *     gcc -shared -fPIC -O2 -o fault_shim.so fault_shim.c -ldl
 *
 * Control, read on every intercepted call (so a running process can be switched on and off):
 *   JL_FAULT_DIR    a directory; a file named after an operation class in it turns that
 *                   class's fault on, and its content names the errno: EIO, ENOSPC or EROFS.
 *                   Classes: "write" (write, pwrite, pwrite64, pwritev), "sync" (fsync,
 *                   fdatasync), "read" (read, pread, pread64).
 *   JL_FAULT_MATCH  only descriptors whose path (/proc/self/fd/N) contains this text fail,
 *                   so the process can still print, log and talk to its parent.
 * Every injected failure appends one byte to $JL_FAULT_DIR/hits, so a test can tell the fault
 * really happened.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

typedef ssize_t (*write_fn)(int, const void *, size_t);
typedef ssize_t (*pwrite_fn)(int, const void *, size_t, off_t);
typedef ssize_t (*pwritev_fn)(int, const struct iovec *, int, off_t);
typedef ssize_t (*read_fn)(int, void *, size_t);
typedef ssize_t (*pread_fn)(int, void *, size_t, off_t);
typedef int (*sync_fn)(int);

#define REAL(name, type) \
    static type real_##name; \
    if (!real_##name) real_##name = (type)dlsym(RTLD_NEXT, #name)

/* The errno to inject for this class on this descriptor, or 0 for none. */
static int fault_for(const char *cls, int fd) {
    const char *dir = getenv("JL_FAULT_DIR");
    const char *match = getenv("JL_FAULT_MATCH");
    char path[4096], target[4096], text[32];
    int saved = errno;
    if (!dir || fd < 3) return 0;
    snprintf(path, sizeof path, "%s/%s", dir, cls);
    int control = open(path, O_RDONLY | O_CLOEXEC);
    if (control < 0) { errno = saved; return 0; }
    static pread_fn raw_pread;  /* not our own pread: that would ask fault_for again */
    if (!raw_pread) raw_pread = (pread_fn)dlsym(RTLD_NEXT, "pread");
    ssize_t n = raw_pread(control, text, sizeof text - 1, 0);
    close(control);
    text[n > 0 ? n : 0] = '\0';
    if (match && *match) {
        char link[64];
        snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
        ssize_t len = readlink(link, target, sizeof target - 1);
        if (len < 0) { errno = saved; return 0; }
        target[len] = '\0';
        if (!strstr(target, match)) { errno = saved; return 0; }
    }
    int code = EIO;
    if (strncmp(text, "ENOSPC", 6) == 0) code = ENOSPC;
    else if (strncmp(text, "EROFS", 5) == 0) code = EROFS;
    snprintf(path, sizeof path, "%s/hits", dir);
    int hits = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (hits >= 0) {
        static write_fn raw_write;
        if (!raw_write) raw_write = (write_fn)dlsym(RTLD_NEXT, "write");
        raw_write(hits, cls, 1);
        close(hits);
    }
    errno = saved;
    return code;
}

#define FAIL_IF(cls, fd) do { int code_ = fault_for(cls, fd); if (code_) { errno = code_; return -1; } } while (0)

ssize_t write(int fd, const void *buf, size_t count) {
    REAL(write, write_fn);
    FAIL_IF("write", fd);
    return real_write(fd, buf, count);
}

ssize_t pwrite(int fd, const void *buf, size_t count, off_t offset) {
    REAL(pwrite, pwrite_fn);
    FAIL_IF("write", fd);
    return real_pwrite(fd, buf, count, offset);
}

ssize_t pwrite64(int fd, const void *buf, size_t count, off_t offset) {
    REAL(pwrite64, pwrite_fn);
    FAIL_IF("write", fd);
    return real_pwrite64(fd, buf, count, offset);
}

ssize_t pwritev(int fd, const struct iovec *iov, int iovcnt, off_t offset) {
    REAL(pwritev, pwritev_fn);
    FAIL_IF("write", fd);
    return real_pwritev(fd, iov, iovcnt, offset);
}

ssize_t read(int fd, void *buf, size_t count) {
    REAL(read, read_fn);
    FAIL_IF("read", fd);
    return real_read(fd, buf, count);
}

ssize_t pread(int fd, void *buf, size_t count, off_t offset) {
    REAL(pread, pread_fn);
    FAIL_IF("read", fd);
    return real_pread(fd, buf, count, offset);
}

ssize_t pread64(int fd, void *buf, size_t count, off_t offset) {
    REAL(pread64, pread_fn);
    FAIL_IF("read", fd);
    return real_pread64(fd, buf, count, offset);
}

int fsync(int fd) {
    REAL(fsync, sync_fn);
    FAIL_IF("sync", fd);
    return real_fsync(fd);
}

int fdatasync(int fd) {
    REAL(fdatasync, sync_fn);
    FAIL_IF("sync", fd);
    return real_fdatasync(fd);
}
