#!/bin/bash
# kubeslurm-health-check: Slurm's HealthCheckProgram on every slurmd pod (slurm.conf,
# spec.nodeHealth.check of the SlurmCluster). Installed by images/slurm/setup.sh.
#
# Slurm runs it as root every HealthCheckInterval and does nothing with its exit status:
# acting is the program's job. So a failing check drains its own node with its message
# (Reason="kubeslurm: health check: ..."), and a passing one resumes the node when, and
# only when, this check was what drained it: drains by people, by the operator or by other
# tools keep their reason and are never lifted here.
#
# Checks, first failure wins:
#   1. the GPU device files /dev/nvidiaN are as many as the GPUs the node registered
#      (its gres in slurmctld);
#   2. where the image has nvidia-smi: it answers and lists that many GPUs;
#   3. the site's own script (spec.nodeHealth.check.siteScript), if mounted: exit 0 passes,
#      otherwise its first line of output is the message.
set -u
# slurmd gives the program an almost empty environment.
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH
REASON_PREFIX="kubeslurm: health check:"
SITE_CHECK=/etc/kubeslurm-health/site-check
node=${SLURMD_NODENAME:-$(hostname)}

# One printable line of at most 200 characters: it becomes a Slurm node reason.
one_line() {
    head -n 1 | tr -c '[:print:]' ' ' | cut -c 1-200 | sed 's/[[:space:]]*$//'
}

# The node as slurmctld sees it. Not registered yet (slurmd runs the check once before it
# registers) or slurmctld unreachable: there is nothing this check could drain.
if ! record=$(timeout 15 scontrol --oneliner show node "$node" 2>/dev/null) || [ -z "$record" ]; then
    exit 0
fi
state=$(sed -n 's/.* State=\([^ ]*\).*/\1/p' <<<"$record")
reason=""
if [[ $record == *" Reason="* ]]; then
    reason=${record#* Reason=}
    reason=$(sed 's/ \[[^]]*\]$//' <<<"$reason")
fi
gres=$(sed -n 's/.* Gres=\([^ ]*\).*/\1/p' <<<"$record")

# GPUs the node registered: the sum over its gres entries gpu[:type]:N[(S:...)].
expected=0
for item in $(sed 's/([^)]*)//g; s/,/ /g' <<<"$gres"); do
    count=${item##*:}
    if [[ $item == gpu:* && $count =~ ^[0-9]+$ ]]; then
        expected=$((expected + count))
    fi
done

check_gpu_files() {
    local found=() file
    for file in /dev/nvidia[0-9]*; do
        [ -c "$file" ] && found+=("$file")
    done
    if [ "${#found[@]}" -ne "$expected" ]; then
        echo "${#found[@]} GPU device files (${found[*]:-none}) but the node registered $expected GPUs (Gres=$gres)"
        return 1
    fi
}

check_nvidia_smi() {
    command -v nvidia-smi >/dev/null || return 0
    local out listed
    if ! out=$(timeout 20 nvidia-smi -L 2>&1); then
        echo "nvidia-smi failed: $(one_line <<<"$out")"
        return 1
    fi
    listed=$(grep -c '^GPU [0-9]' <<<"$out")
    if [ "$listed" -ne "$expected" ]; then
        echo "nvidia-smi lists $listed GPUs but the node registered $expected (Gres=$gres)"
        return 1
    fi
}

check_site_script() {
    [ -x "$SITE_CHECK" ] || return 0
    local out status
    out=$(timeout 25 "$SITE_CHECK" </dev/null 2>&1)
    status=$?
    if [ "$status" -ne 0 ]; then
        out=$(one_line <<<"$out")
        echo "site check failed (exit $status)${out:+: $out}"
        return 1
    fi
}

problem=""
if [ "$expected" -gt 0 ]; then
    problem=$(check_gpu_files) && problem=$(check_nvidia_smi)
fi
[ -z "$problem" ] && problem=$(check_site_script)

drained=false
case "+$state+" in *+DRAIN+*|*+DRAINED+*|*+DRAINING+*) drained=true ;; esac
ours=false
[[ $reason == "$REASON_PREFIX"* ]] && ours=true

if [ -n "$problem" ]; then
    wanted="$REASON_PREFIX $(one_line <<<"$problem")"
    echo "$node: $wanted" >&2
    # A node drained for another reason keeps it: overwriting would lose why a person
    # or tool drained it, and this check's resume would later undo their drain.
    if { ! $drained || $ours; } && [ "$reason" != "$wanted" ]; then
        timeout 15 scontrol update NodeName="$node" State=DRAIN Reason="$wanted"
    fi
    exit 1
fi
if $drained && $ours; then
    timeout 15 scontrol update NodeName="$node" State=RESUME
fi
exit 0
