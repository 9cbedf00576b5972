# Sourced by the GPU scripts (run-on-device.sh, run-nccl-clients.sh, run-torch-gpu.sh): which of
# their steps run, and under what limit, so that tests/gpu/device-checks.sh can run them in one
# order of importance across the three, within one device call or two.
#   GPU_STEP_FILTER  an extended regular expression: only steps whose name matches run (default:
#                    every step); the others are passed over without a word
#   GPU_STEP_DONE    a file of the names of steps already run (by an earlier call on the same warm
#                    machine): those are passed over too, and every step run is added to it
#   GPU_DEADLINE     seconds since the epoch: a step's limit is cut to the time left before it, and
#                    a step that would start with under 20 s left is skipped (not added to
#                    GPU_STEP_DONE, so that the next call runs it)

# gpu_step_wanted NAME: whether the step NAME runs at all
gpu_step_wanted() {
  if [[ -n ${GPU_STEP_FILTER:-} && ! $1 =~ $GPU_STEP_FILTER ]]; then return 1; fi
  if [[ -n ${GPU_STEP_DONE:-} && -f $GPU_STEP_DONE ]] && grep -qxF -- "$1" "$GPU_STEP_DONE"; then
    return 1
  fi
  return 0
}

# gpu_step_limit LIMIT: LIMIT cut to the time left before GPU_DEADLINE; 0 when under 20 s are left
gpu_step_limit() {
  local limit=$1 left
  if [[ -n ${GPU_DEADLINE:-} ]]; then
    left=$((GPU_DEADLINE - $(date +%s)))
    if ((left < 20)); then echo 0; return; fi
    ((limit <= left)) || limit=$left
  fi
  echo "$limit"
}

# gpu_step_ran NAME: note that NAME ran (whatever its outcome)
gpu_step_ran() {
  if [[ -n ${GPU_STEP_DONE:-} ]]; then echo "$1" >>"$GPU_STEP_DONE"; fi
}
