// The table of every variable Hora reads (config.h's Variable): one row each, from which the
// configuration reference is generated; config.cc reads the environment by it.
#include <iterator>
#include <vector>

#include "comm/config.h"

namespace hora {

namespace {

// Every HORA_* variable, with the NCCL_* variables each also reads (whichever ABI the program
// uses; HORA_* wins where both are set), then the NCCL_* variables Hora knows and ignores. The
// configuration reference (docs/configuration.md) is generated from this table
// (tools/hora_config_doc.cc, `ninja docs-configuration`), and a test keeps the two alike and checks
// that every HORA_* name the code reads is here. The table is the one list of every variable, so
// it stays here, NCCL column included; config_nccl.cc translates that column's values
// (config_nccl.h). Columns: name, topic, type, default, values, meaning, NCCL twins, how read.
const Variable kVariables[] = {
    // Core: logging, timeouts, algorithms, the pipeline.
    {"HORA_DEBUG", Topic::Core, "keyword", "WARN", "NONE, WARN, INFO or TRACE (any case)",
     "log level; lines name host, pid, thread and rank. At INFO the first line of a process names the build "
     "(version, build type, kernels, transports)",
     "NCCL_DEBUG", "VERSION: WARN, and the version banner; ABORT: WARN. Unset, Hora warns (NCCL is silent)"},
    {"HORA_DEBUG_SUBSYS", Topic::Core, "list", "ALL", "comma list of INIT, BOOTSTRAP, NET, COLL, ENV, ALL; ^X excludes X",
     "the subsystems that log", "NCCL_DEBUG_SUBSYS",
     "NCCL's syntax (a leading ^ excludes the whole list); P2P and SHM as NET, GRAPH and TUNING as COLL (in an "
     "exclusion only NET and COLL themselves exclude those); ALLOC, CALL, PROXY, NVLS, REG, PROFILE, RAS ignored. "
     "Unset, Hora logs ALL (NCCL: INIT,BOOTSTRAP,ENV)"},
    {"HORA_DEBUG_FILE", Topic::Core, "path pattern", "(stderr)", "a file name; %h: host name, %p: pid, %%: a %",
     "file the log is appended to, e.g. /tmp/hora.%h.%p; a file that cannot be opened is a warning, and the log "
     "stays where it was",
     "NCCL_DEBUG_FILE", "as it is (%h, %p); appended to, where NCCL truncates"},
    {"HORA_TIMEOUT_MS", Topic::Core, "integer (ms)", "600000", "1 to 31536000000",
     "milliseconds without progress before a wait fails with horaTimeout (horaConfig_t.timeoutMs overrides it "
     "per communicator); a transfer that keeps moving never times out. The torch.distributed backend takes it "
     "over init_process_group's default timeout, and hora.torch's stall shutdown defaults to it"},
    {"HORA_ALGO", Topic::Core, "list", "auto",
     "auto; an algorithm's name (forced for every collective that has it); or collective:name pairs, comma "
     "separated, collective one of allreduce, broadcast, reduce, allgather, reducescatter, alltoall, gather, "
     "scatter, barrier (an unknown name is an error listing the names)",
     "the algorithm of each collective: auto lets the planner choose, e.g. allreduce:ring,broadcast:chain",
     "NCCL_ALGO",
     "NCCL's syntax (lists, ^, collective:list;...): per collective, the one of Ring (ring) and Tree (tree) it leaves "
     "that Hora's has is forced; Hora's planner chooses where it leaves both or neither; other algorithms (NVLS, PAT, "
     "CollNet...) are ignored with a warning"},
    {"HORA_TUNE_FILE", Topic::Core, "path", "(built-in costs)", "a file written by hora-tune",
     "the planner's cost model, instead of the built-in costs; a file that cannot be read or parsed is an error"},
    {"HORA_CHUNK_BYTES", Topic::Core, "size", "524288", "4096 to 64M bytes (K and M suffixes)",
     "pipeline chunk and shared-stage slot; must agree on every rank"},
    {"HORA_HIER_STAGE", Topic::Core, "0 or 1", "1", "0 or 1",
     "across hosts: hier's phases within a host through the shared stage (1) or shared-memory messages (0); must "
     "agree on every rank"},
    {"HORA_CALL_CHECK", Topic::Core, "0 or 1", "1", "0 or 1",
     "1: a mismatched call fails on every rank: a rank that only gives (a Broadcast's root, a Reduce's senders, "
     "count-0 calls) compares its call with its neighbour's later, through the shared stage or by a one-byte "
     "message, and fails at a later call (its predecessor's failure reaches it within 48 calls through the stage, "
     "1024 over TCP, 256 over shared memory, 48 over verbs) or at its finalize; 0: such ranks hear of a mismatch only if a peer that found it fails the "
     "communicator; must agree on every rank"},
    {"HORA_KERNEL_ISA", Topic::Core, "keyword", "auto", "auto, scalar, avx2 or avx512",
     "the reduction kernels; one this CPU or build does not support is an error"},
    {"HORA_TOPO_FILE", Topic::Core, "path", "(this machine)", "an hwloc XML file",
     "read the topology from this file instead of this machine (hora-topo shows it)"},
    {"HORA_TRACE_CALLS", Topic::Core, "integer", "2000", "0 to 1000000",
     "the calls each communicator's flight recorder keeps (what each asked for, its plan, its state and what it "
     "waits for), dumped on a failure, on SIGUSR1 and by horaCommDump for hora-inspect; 0 records none and writes "
     "no dump on a failure"},
    {"HORA_DUMP_DIR", Topic::Core, "path", "(the working directory)", "a directory (created if missing)",
     "where the flight recorder's dumps go, one file per process: hora-dump.<host>.<pid>.json"},
    {"HORA_DUMP_SIGNAL", Topic::Core, "0 or 1", "1", "0 or 1",
     "1: SIGUSR1 makes the process write its dump (a handler installed before it is kept and called too); 0 "
     "leaves SIGUSR1 alone"},
    {"HORA_COMM_BLOCKING", Topic::Core, "0 or 1", "1", "0 or 1",
     "the default of horaConfig_t.blocking: 0 makes init, split, shrink and finalize return horaInProgress at once",
     "NCCL_COMM_BLOCKING", "as it is (0 or 1)"},
    // Transports.
    {"HORA_TRANSPORTS", Topic::Transports, "list", "(every transport built in)",
     "comma list of the transports built in: shm (ranks of one host), tcp, ib (where libibverbs was found at build "
     "time); ^X excludes X; the list must leave one",
     "transports to use; HORA_DEBUG=INFO prints each rank's links", "NCCL_IB_DISABLE,NCCL_SHM_DISABLE,NCCL_NET",
     "NCCL_IB_DISABLE (not 0) leaves out ib, NCCL_SHM_DISABLE=1 shm; NCCL_NET=IB leaves out tcp (ignored in a build without ib), NCCL_NET=Socket ib; other networks ignored"},
    {"HORA_SHM_SINGLE_COPY", Topic::Transports, "0 or 1", "1", "0 or 1",
     "1: a large Broadcast between the ranks of one host is read by each rank straight from the root's buffer "
     "(threads of one process; processes through process_vm_readv, where the kernel allows it, which is probed at "
     "init and agreed by the host's ranks); 0: through the root's slots of the shared stage. HORA_DEBUG=INFO says "
     "which, and why"},
    {"HORA_SOCKET_IFNAME", Topic::Transports, "list", "(the route to the rendezvous)",
     "comma list of interface name prefixes, =exact names, ^excluded ones",
     "interfaces for TCP", "NCCL_SOCKET_IFNAME",
     "NCCL's syntax (a leading ^ or = applies to the whole list; :port is dropped); ^= is ignored"},
    {"HORA_NSOCKS_PERPEER", Topic::Transports, "integer", "2", "1 to 16",
     "TCP sockets per peer (2: a MiB both ways at once takes 1.3-2x less time over loopback than on one; more "
     "helps on fast NICs); must agree on every rank",
     "NCCL_SOCKET_NTHREADS,NCCL_NSOCKS_PERTHREAD", "their product (an unset one counts 1), clamped to 1..16"},
    // The ib transport.
    {"HORA_IB_HCA", Topic::Ib, "list", "(every active port, nearest first)",
     "mlx5_0:1,mlx5_1: name prefixes with an optional :port; a leading = for exact names, ^ to exclude the list",
     "RDMA devices and ports for the ib transport; a filter that leaves no usable port is an error naming it and "
     "every port seen",
     "NCCL_IB_HCA", "the same syntax; one that leaves no usable port turns ib off, as NCCL falls back to sockets (from "
     "HORA_IB_HCA it is an error)"},
    {"HORA_IB_GID_INDEX", Topic::Ib, "integer", "(the first RoCE v2 GID with an IPv4-mapped address)", "0 to 255",
     "the GID index of RoCE ports (InfiniBand ports are addressed by LID)", "NCCL_IB_GID_INDEX",
     "-1: chosen per port"},
    {"HORA_IB_QPS_PER_PEER", Topic::Ib, "integer", "1", "1 to 16",
     "queue pairs per peer for the ib transport; a message of 64 KiB or more per queue pair is striped across "
     "them; must agree on every rank",
     "NCCL_IB_QPS_PER_CONNECTION", "clamped to 1..16"},
    // CUDA.
    {"HORA_CUDA", Topic::Cuda, "keyword", "auto", "auto, off, emulate or emulate-shared",
     "device buffers and CUDA streams: auto (where the build has CUDA and the machine a driver and a GPU), off "
     "(every pointer is host memory; the driver is never loaded), emulate (an emulated GPU in host memory, each "
     "process's own, for tests; the Python package reads it too), emulate-shared (the same, one GPU that the "
     "processes of the host share)"},
    {"HORA_CUDA_STREAM_WAIT", Topic::Cuda, "keyword", "memop", "memop or kernel",
     "how a CUDA stream waits for a call's worker: memop (cuStreamWaitValue32; the polling kernel where the "
     "driver refuses it) or kernel (a one-thread kernel polls the word)"},
    {"HORA_CUDA_IPC", Topic::Cuda, "0 or 1", "1", "0 or 1",
     "0: device buffers of the ranks of one host are bounced through host memory instead of the CUDA IPC stage; "
     "must agree on every rank",
     "NCCL_P2P_DISABLE", "1 as 0 (stage through host memory)"},
    {"HORA_CUDA_BOUNCE_CHUNK", Topic::Cuda, "size", "1M", "0, or 4096 to 256M bytes (K and M suffixes)",
     "device buffers bounced through host memory (across hosts, or with HORA_CUDA_IPC=0) are copied in and out "
     "in chunks of this size (at most 32 each way, larger chunks for larger buffers), each copy an op of the "
     "call's program, so that the copies, the wire and the reductions overlap; 0: each buffer is copied whole, "
     "in before the call and out after it; may differ between ranks"},
    {"HORA_CUDA_KERNELS", Topic::Cuda, "0 or 1", "1", "0 or 1",
     "1: a collective whose buffers are all on the device, between ranks of one host, is a kernel on the "
     "caller's stream that moves and reduces the data itself through the ranks' mapped device memory (no host "
     "hand-off); 0: such calls go through the communicator's worker thread (the CUDA IPC stage for an AllReduce, "
     "bouncing for the rest); must agree on every rank; needs HORA_CUDA_IPC=1"},
    // How a rank finds its job (horaCommInitFromEnv, hora.torch's init).
    {"HORA_RANK", Topic::Launch, "integer", "", "0 to HORA_SIZE-1",
     "this rank (horaCommInitFromEnv; set by hora-run)"},
    {"HORA_SIZE", Topic::Launch, "integer", "", "1 or more", "number of ranks (set by hora-run)"},
    {"HORA_LOCAL_RANK", Topic::Launch, "integer", "", "0 to HORA_LOCAL_SIZE-1",
     "rank among this host's ranks (set by hora-run for the program; the library does not read it)"},
    {"HORA_LOCAL_SIZE", Topic::Launch, "integer", "", "1 or more",
     "number of ranks on this host (set by hora-run for the program; the library does not read it)"},
    {"HORA_ID", Topic::Launch, "hex", "", "256 hex digits", "the job's unique id (set by hora-run)"},
    {"HORA_ROOT", Topic::Launch, "host:port", "(under torchrun and srun: derived from their variables)",
     "host:port of one of rank 0's host's addresses",
     "where rank 0 hosts the rendezvous, instead of HORA_ID. Rank 0 refuses an address that is not its host's; "
     "the other ranks warn every 10 s while they cannot reach it"},
    {"HORA_SECRET", Topic::Launch, "hex", "", "64 hex digits, the same on every rank",
     "the rendezvous' shared secret; required with HORA_ROOT and with the rendezvous torchrun's (MASTER_ADDR) and "
     "srun's variables imply"},
    {"HORA_SECRET_FILE", Topic::Launch, "path", "", "a file holding 64 hex digits (mode 600)",
     "HORA_SECRET from a file (e.g. on a shared file system)"},
    // hora-run.
    {"HORA_RUN_GRACE_S", Topic::HoraRun, "number (s)", "5", "seconds, 0 or more",
     "hora-run: seconds between SIGTERM and SIGKILL when it stops ranks"},
    {"HORA_RUN_BIND", Topic::HoraRun, "keyword", "(core when every rank can have a CPU of its own, else none)",
     "core, numa or none", "hora-run: --bind's default"},
    {"HORA_RUN_CPU_CLAIMS", Topic::HoraRun, "path", "/dev/shm/hora-run.cpus", "a file name",
     "hora-run: the file in which the jobs of a host claim the CPUs they bind to"},
    // Python: the hora package and hora.torch.
    {"HORA_LIBRARY", Topic::Python, "path", "(the path recorded at install time, then the build tree)",
     "the path of libhora.so", "the Python package: the library to load"},
    {"HORA_CYCLE_TIME", Topic::Python, "number (ms)", "1", "more than 0",
     "hora.torch: milliseconds between the engine's rounds"},
    {"HORA_FUSION_THRESHOLD", Topic::Python, "integer (bytes)", "67108864", "0 or more",
     "hora.torch: bytes of a fusion buffer; 0 reduces every tensor by itself"},
    {"HORA_CACHE_CAPACITY", Topic::Python, "integer", "1024", "0 or more",
     "hora.torch: operations the response cache remembers; 0 turns it off"},
    {"HORA_TIMELINE", Topic::Python, "path", "", "a file name",
     "hora.torch: rank 0 writes a Chrome-trace timeline to this file"},
    {"HORA_TIMELINE_MARK_CYCLES", Topic::Python, "0 or 1", "0", "0 or 1",
     "hora.torch: 1 marks every engine round that starts work in the timeline"},
    {"HORA_STALL_CHECK_TIME_SECONDS", Topic::Python, "number (s)", "60", "0 or more",
     "hora.torch: warn about an operation some ranks have not submitted after this long (0: never)"},
    {"HORA_STALL_SHUTDOWN_TIME_SECONDS", Topic::Python, "number (s)", "(HORA_TIMEOUT_MS / 1000)", "0 or more",
     "hora.torch: then cancel it on every rank with ValueError (0: never)"},
    // The torch.distributed backend.
    {"HORA_TORCH_ANY_SOURCE", Topic::TorchBackend, "0 or 1", "0", "0 or 1, on every rank, when the group is made",
     "backend hora: 1 lets recv() omit the source in groups of 3+ ranks; each send then first announces itself in "
     "the group's store (0.1-0.2 ms)"},
    // The perf scripts.
    {"HORA_RUN", Topic::Perf, "path", "(build/tools/hora-run, else hora-run on PATH)", "the path of hora-run",
     "perf/table1.py and perf/py_overhead.py: the hora-run to start ranks with (not passed on to the ranks)"},
    {"HORA_BUILD", Topic::Perf, "path", "(build of the checkout)", "a build directory",
     "perf/compare: the build whose tools it runs (its -B option's default)"},
    // NCCL's variables that Hora knows and ignores (any other NCCL_* is ignored too).
    {nullptr, Topic::NcclIgnored, "", "", "", "", "NCCL_BUFFSIZE,NCCL_CHUNK_SIZE,NCCL_P2P_NET_CHUNKSIZE,NCCL_P2P_NVL_CHUNKSIZE,NCCL_P2P_PCI_CHUNKSIZE",
     "NCCL's buffer of all a connection's pipeline steps and its send/recv chunks, not HORA_CHUNK_BYTES' chunk"},
    {nullptr, Topic::NcclIgnored, "", "", "", "", "NCCL_PROTO,NCCL_MIN_NCHANNELS,NCCL_MAX_NCHANNELS,NCCL_MIN_CTAS,NCCL_MAX_CTAS,NCCL_NTHREADS",
     "protocols, channels and thread counts of NCCL's kernels"},
    {nullptr, Topic::NcclIgnored, "", "", "", "", "NCCL_P2P_LEVEL,NCCL_NET_GDR_LEVEL,NCCL_NET_GDR_READ,NCCL_CROSS_NIC,NCCL_NVLS_ENABLE,NCCL_COLLNET_ENABLE,NCCL_PXN_DISABLE,NCCL_CUMEM_ENABLE",
     "GPU and fabric features Hora does not have"},
    {nullptr, Topic::NcclIgnored, "", "", "", "", "NCCL_IB_TIMEOUT,NCCL_IB_RETRY_CNT,NCCL_IB_SL,NCCL_IB_TC,NCCL_IB_SPLIT_DATA_ON_QPS,NCCL_SOCKET_FAMILY",
     "link settings Hora leaves at their defaults"},
    {nullptr, Topic::NcclIgnored, "", "", "", "", "NCCL_TOPO_FILE", "NCCL's own topology XML (HORA_TOPO_FILE reads hwloc's)"},
    {nullptr, Topic::NcclIgnored, "", "", "", "", "NCCL_COMM_ID", "a rendezvous without a secret: use HORA_ROOT with HORA_SECRET"},
    {nullptr, Topic::NcclIgnored, "", "", "", "", "NCCL_CONF_FILE,NCCL_DEBUG_TIMESTAMP_FORMAT,NCCL_DEBUG_TIMESTAMP_LEVELS,NCCL_NET_PLUGIN,NCCL_TUNER_PLUGIN,NCCL_PROFILER_PLUGIN",
     "Hora reads no configuration file (nor /etc/nccl.conf), stamps no time on log lines and loads no plugins"},
};

}  // namespace

const char* topicTitle(Topic t) {
  switch (t) {
    case Topic::Core: return "Core: logging, timeouts, algorithms";
    case Topic::Transports: return "Transports";
    case Topic::Ib: return "The ib transport (RDMA)";
    case Topic::Cuda: return "CUDA";
    case Topic::Launch: return "Launching: rank, size and rendezvous";
    case Topic::HoraRun: return "hora-run";
    case Topic::Python: return "Python: the hora package and hora.torch";
    case Topic::TorchBackend: return "The torch.distributed backend";
    case Topic::Perf: return "The perf scripts";
    case Topic::NcclIgnored: return "NCCL variables Hora knows and ignores";
  }
  return "";
}

const std::vector<Variable>& variables() {
  static const std::vector<Variable> all(std::begin(kVariables), std::end(kVariables));
  return all;
}

}  // namespace hora
