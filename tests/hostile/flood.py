"""Floods a listening socket with idle connections and holds them (tests/hostile/test_flood.sh).

  flood.py unix[-keep] PID COUNT READY [UID]   every abstract Unix socket named @hora-... that process
                                        PID listens on gets COUNT connections (as user UID if
                                        given: another local user)
  flood.py tcp HOST:PORT COUNT READY     COUNT connections to a TCP listener

unix-keep goes on connecting for as long as it runs, closing its oldest connection whenever it
holds COUNT, so that the listener's backlog stays full however fast it is drained.
Writes a line to READY (created empty at start) once the connections are open (or refused: a full backlog is the point), then
holds them until killed.
"""
import errno
import os
import resource
import socket
import sys
import time


def family_of(pid):
    """pid and its descendants (a rank may run under timeout or a shell)."""
    children = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/stat" % d) as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def hora_sockets(pid):
    """Abstract names of the listening Unix sockets that process pid (or a descendant) holds."""
    inodes = set()
    for p in family_of(pid):
        try:
            fds = os.listdir("/proc/%d/fd" % p)
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink("/proc/%d/fd/%s" % (p, fd))
            except OSError:
                continue
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
    names = []
    with open("/proc/net/unix") as f:
        next(f)
        for line in f:
            parts = line.split()
            # Num RefCount Protocol Flags Type St Inode Path; St 01 with flag 0x10000: listening
            if len(parts) >= 8 and parts[6] in inodes and parts[7].startswith("@hora-"):
                names.append(parts[7])
    return names


def main():
    kind, target, count, ready = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    held = []
    ready_file = open(ready, "w")  # before any setuid: the directory is the caller's
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # room for the flood
    keep = kind.endswith("-keep")
    kind = kind.replace("-keep", "")
    if kind == "unix":
        pid = int(target)
        names = []
        for _ in range(600):  # the rank makes its socket early in its init
            names = hora_sockets(pid)
            if names:
                break
            time.sleep(0.05)
        if not names:
            sys.exit("no @hora- socket in process %d" % pid)
        if len(sys.argv) > 5:
            os.setgid(int(sys.argv[5]))
            os.setuid(int(sys.argv[5]))
        addrs = ["\0" + n[1:] for n in names]
        family = socket.AF_UNIX
    else:
        host, port = target.rsplit(":", 1)
        addrs = [(host, int(port))]
        family = socket.AF_INET
    opened = refused = 0
    for addr in addrs:
        for _ in range(count):
            s = socket.socket(family, socket.SOCK_STREAM)
            s.setblocking(False)
            err = s.connect_ex(addr)
            if err not in (0, errno.EINPROGRESS):  # EAGAIN: the backlog is full
                refused += 1
                s.close()
                continue
            held.append(s)
            opened += 1
    print("flood: %d connections open, %d refused, to %s" % (opened, refused, ", ".join(map(str, addrs))),
          flush=True)
    ready_file.write("ready\n")
    ready_file.close()
    end = time.time() + 600
    while keep and time.time() < end:
        for addr in addrs:
            s = socket.socket(family, socket.SOCK_STREAM)
            s.setblocking(False)
            if s.connect_ex(addr) in (0, errno.EINPROGRESS):
                held.append(s)
            else:
                s.close()
                time.sleep(0.001)  # the backlog is full: it stays full
            if len(held) > count:
                held.pop(0).close()
    time.sleep(600)


main()
