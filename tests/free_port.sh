#!/usr/bin/env bash
# Prints a TCP port P, free now on 127.0.0.1, for a test's rendezvous (bound a moment later):
#   free_port.sh [OFFSET]   P + OFFSET is free too (the rendezvous beside torchrun's MASTER_PORT
#                           takes MASTER_PORT + 10000)
# P and P + OFFSET lie below 32768, outside Linux's range of ephemeral ports, so that no
# connection another test opens meanwhile can take them.
offset=${1:-0}
exec /usr/bin/python3 - "$offset" <<'PY'
import random, socket, sys
offset = int(sys.argv[1])
for _ in range(500):
    p = random.randint(10000, 32767 - offset)
    try:
        for q in {p, p + offset}:
            s = socket.socket()
            s.bind(("127.0.0.1", q))
            s.close()
    except OSError:
        continue
    print(p)
    break
else:
    sys.exit("no free port found")
PY
