#!/bin/sh
# Slurm Epilog for allsmi's job-mapping directory: removes $SLURM_JOB_ID from every file
# of the directory, and a file that no job is left in (docs/attribution.md, "Slurm").
# Same settings as allsmi-prolog.sh. Scans every file rather than trusting SLURM_JOB_GPUS,
# so that nothing is left behind if the job's devices are not known here; always exits 0.
set -u
dir="${ALLSMI_HPC_JOB_DIR:-/run/allsmi/hpc-jobs}"
job="${SLURM_JOB_ID:-}"
case "$job" in ''|*[!0-9_+]*) echo "allsmi-epilog: no usable SLURM_JOB_ID" >&2; exit 0 ;; esac
[ -d "$dir" ] || exit 0
(
    flock -w 10 9 || { echo "allsmi-epilog: $dir/.lock busy" >&2; exit 0; }
    for file in "$dir"/*; do
        [ -f "$file" ] && [ ! -L "$file" ] || continue
        grep -qx -- "$job" "$file" || continue
        name=${file##*/}
        tmp=$(mktemp "$dir/.$name.XXXXXX") || continue
        grep -vx -- "$job" "$file" >"$tmp"
        if [ -s "$tmp" ]; then
            chmod 0644 "$tmp" && mv -f -- "$tmp" "$file" || rm -f -- "$tmp"
        else
            rm -f -- "$tmp" "$file"
        fi
    done
) 9>"$dir/.lock"
exit 0
