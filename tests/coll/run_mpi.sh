#!/bin/sh
# run_mpi.sh NP PROGRAM - runs PROGRAM on NP Open MPI ranks on this machine
# (oversubscribed, allowed as root); exit 77 (ctest: skipped) without mpirun.
np=$1; shift
command -v mpirun >/dev/null 2>&1 || { echo "mpirun not found: skipped"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Shared memory and loopback only; no warnings about missing fabrics.
export OMPI_MCA_btl=self,vader,tcp OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
export OMPI_MCA_btl_base_warn_component_unused=0
exec mpirun --allow-run-as-root --oversubscribe -np "$np" "$@"
