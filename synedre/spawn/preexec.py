"""What the agent's child runs between fork and exec (Linux): a user and mount namespace of
its own for a launch kept apart (`launcher.Apart` says why and what it sees), and its death
with the worker's process.

Imported by the launcher, so before any fork: after the child drops to the agent's user, the
interpreter's own modules may be out of its reach (a Python installed under /root).
"""
from __future__ import annotations

import ctypes
import errno
import os
import signal
import stat
from pathlib import Path

# Linux's constants (<sched.h>, <sys/mount.h>): the same on every architecture.
CLONE_NEWNS, CLONE_NEWUSER = 0x00020000, 0x10000000
PR_SET_PDEATHSIG, PR_SET_DUMPABLE = 1, 4
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_BIND, MS_REC, MS_PRIVATE = 0x2, 0x4, 0x8, 0x1000, 0x4000, 0x40000
SHM_SIZE = "64m"  # the launch's own /dev/shm (a tmpfs): only the CLI itself writes there, see `launcher.Apart`
_LIBC = ctypes.CDLL(None, use_errno=True)


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    def c(v: str | None) -> bytes | None:
        return v.encode() if v is not None else None
    if _LIBC.mount(c(source), c(target), c(fstype), ctypes.c_ulong(flags), c(data)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {source} on {target}: {os.strerror(err)}")


def _mountpoint(path: str) -> None:
    """`path` made in the new /tmp (0711 whatever the umask), a link on the way refused: the
    mount lands where it is named, nowhere a link would send it."""
    current = "/"
    for part in path.split("/")[1:]:
        current = os.path.join(current, part)
        try:
            os.mkdir(current, 0o711)
            os.chmod(current, 0o711)
        except FileExistsError:
            pass
        if not stat.S_ISDIR(os.lstat(current).st_mode):
            raise OSError(errno.ENOTDIR, f"{current} is not a directory")


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def enter_apart(own_tmp: Path, keep: tuple[Path, ...]) -> None:
    """In the child, as the user the CLI runs as, before exec: `own_tmp` bound on /tmp (`keep`
    bound again over it) and a fresh /dev/shm, in a user and mount namespace of its own
    (`launcher.Apart`)."""
    if not stat.S_ISDIR(os.lstat(own_tmp).st_mode):
        raise OSError(errno.ENOTDIR, f"{own_tmp} is not a directory")
    uid, gid = os.geteuid(), os.getegid()
    # A process that changed its credentials is not dumpable, and its /proc files are root's:
    # it could not write its own maps. It is dumpable again at exec in any case.
    _LIBC.prctl(PR_SET_DUMPABLE, 1)
    if _LIBC.unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"unshare(CLONE_NEWUSER | CLONE_NEWNS): {os.strerror(err)}")
    _write("/proc/self/setgroups", "deny")  # before gid_map, without a privilege outside
    _write("/proc/self/uid_map", f"{uid} {uid} 1\n")
    _write("/proc/self/gid_map", f"{gid} {gid} 1\n")
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    tmp = os.path.realpath("/tmp")
    # the launch's own paths the new /tmp covers, held open: their names are gone once it is on
    kept = [(p, os.open(p, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC))
            for p in sorted({os.path.realpath(k) for k in keep})
            if os.path.commonpath([p, tmp]) == tmp and p != tmp]
    try:
        _mount(str(own_tmp), tmp, None, MS_BIND)
        for path, fd in kept:
            if any(os.path.commonpath([path, k]) == k for k, _ in kept if k != path):
                continue  # inside another kept path, which brings it along
            _mountpoint(path)
            _mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
    finally:
        for _, fd in kept:
            os.close(fd)
    if os.path.isdir("/dev/shm"):
        _mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
               f"mode=0700,size={SHM_SIZE},uid={uid},gid={gid}")


def die_with_parent(parent: int | None = None) -> None:
    """In the child before exec: SIGKILL it if the worker process dies, even by SIGKILL,
    so a killed worker leaves no agent running (Linux; a no-op elsewhere). If the parent
    already died before the signal was armed, die now."""
    try:
        _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except AttributeError:
        pass
    if parent is not None and os.getppid() != parent:
        os._exit(137)
