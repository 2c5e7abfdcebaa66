#!/bin/sh
# Slurm Prolog for allsmi's job-mapping directory (docs/attribution.md, "Slurm").
#
# Adds $SLURM_JOB_ID to one file per device the job was given, in the directory
# allsmi reads as [attribution] hpc_job_dir / $ALLSMI_HPC_JOB_DIR (the same layout as
# dcgm-exporter's --hpc-job-mapping-dir, so both can share it). Install on every node:
#   Prolog=/etc/slurm/allsmi-prolog.sh   Epilog=/etc/slurm/allsmi-epilog.sh   (slurm.conf)
#
# Settings (environment of slurmd, or edit the defaults below):
#   ALLSMI_HPC_JOB_DIR  the directory (default /run/allsmi/hpc-jobs)
#   ALLSMI_HPC_VENDOR   how the files are named: "nvidia" (default) writes bare indices as
#                       dcgm-exporter does ("0", "3"); amd, gaudi, furiosa, rebellions or
#                       tenstorrent write "<vendor><index>" ("amd3")
# Devices come from SLURM_JOB_GPUS (the GRES indices Slurm gave the job; set in the Prolog for
# AMD as well, where CUDA_VISIBLE_DEVICES is not), else CUDA_VISIBLE_DEVICES.
#
# A prolog that fails drains the node: this one reports problems on stderr (slurmd's log)
# and always exits 0.
set -u
dir="${ALLSMI_HPC_JOB_DIR:-/run/allsmi/hpc-jobs}"
vendor="${ALLSMI_HPC_VENDOR:-nvidia}"
job="${SLURM_JOB_ID:-}"
devices="${SLURM_JOB_GPUS:-${CUDA_VISIBLE_DEVICES:-}}"

case "$job" in ''|*[!0-9_+]*) echo "allsmi-prolog: no usable SLURM_JOB_ID" >&2; exit 0 ;; esac
[ -n "$devices" ] || exit 0
case "$vendor" in nvidia|amd|gaudi|furiosa|rebellions|tenstorrent) ;;
    *) echo "allsmi-prolog: unknown ALLSMI_HPC_VENDOR '$vendor'" >&2; exit 0 ;; esac
umask 022
mkdir -p "$dir" || { echo "allsmi-prolog: cannot create $dir" >&2; exit 0; }

add_job() {  # $1: file name; appends $job unless present; atomic replace under a lock
    file="$dir/$1"
    (
        flock -w 10 9 || { echo "allsmi-prolog: $dir/.lock busy" >&2; exit 0; }
        if [ -f "$file" ] && grep -qx -- "$job" "$file"; then exit 0; fi
        tmp=$(mktemp "$dir/.$1.XXXXXX") || exit 0
        { [ -f "$file" ] && cat -- "$file"; printf '%s\n' "$job"; } >"$tmp"
        chmod 0644 "$tmp" && mv -f -- "$tmp" "$file" || rm -f -- "$tmp"
    ) 9>"$dir/.lock"
}

old_ifs=$IFS
IFS=,
for index in $devices; do
    IFS=$old_ifs
    case "$index" in ''|*[!0-9]*) continue ;; esac   # indices only (not uuids or MIG names)
    if [ "$vendor" = nvidia ]; then add_job "$index"; else add_job "$vendor$index"; fi
done
exit 0
