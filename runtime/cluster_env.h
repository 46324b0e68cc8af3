// cluster_env.h: what the cluster launchers (Slurm's srun, Open MPI's mpirun, torchrun) tell a process
// about where its job's rank 0 is, turned into a rendezvous address. Pure functions of strings (the
// environment is read by launcher.cpp), so each rule is unit-tested on its own.
#pragma once
#include <string>
#include <vector>

namespace tpshard {

/// Expand a Slurm hostlist ("node[01-03,07],gpu5", "a,b", "rack1-n[1-2]") into host names in order:
/// bracket ranges keep their zero padding (node[08-10] -> node08 node09 node10). Throws Error naming the
/// string when a bracket is unbalanced or a range is malformed (hint: the Slurm hostlist syntax).
std::vector<std::string> expand_slurm_hostlist(const std::string& hostlist);

/// The rendezvous port of a Slurm job step, the same in every task of the step without talking: the first
/// port of SLURM_STEP_RESV_PORTS ("12000-12002", "12000,12005-12006": the ports Slurm reserved for this
/// step on its nodes when slurm.conf has MpiParams=ports=...), else 15000 + 10 x (SLURM_JOB_ID mod 1000)
/// + (SLURM_STEP_ID mod 10), so that up to 10 steps of one job running at the same time (`srun ... &
/// srun ...` in one allocation) get distinct ports. A reserved-ports string that is not a port list is
/// ignored; a step id that is not a number counts as 0; 29517 when the job id is empty or not a number.
int slurm_master_port(const std::string& job_id, const std::string& step_id = "",
                      const std::string& resv_ports = "");

/// The number of tasks of a Slurm step on node node_id (SLURM_NODEID) from SLURM_STEP_TASKS_PER_NODE,
/// whose form is "4", "2(x3)", "3,2" or "2(x2),1" (counts in node order, "(xN)" repeating one N times).
/// 0 when the string is malformed or has fewer nodes than node_id + 1.
int slurm_tasks_on_node(const std::string& tasks_per_node, int node_id);

/// The host of mpirun itself from Open MPI 4's OMPI_MCA_orte_hnp_uri ("JOBID.0;tcp://10.0.0.1,10.0.1.1:4242;
/// tcp6://[fd00::1]:5151"): its first IPv4 address, else its first IPv6 address, else "" when the string
/// has none. Under `mpirun -H a,b` started on host a, rank 0 runs there.
std::string ompi_hnp_host(const std::string& hnp_uri);

/// The rendezvous port of an Open MPI job: 20000 + (OMPI_MCA_ess_base_jobid mod 10000), the same on
/// every rank; 29517 when the id is empty or not a number.
int ompi_master_port(const std::string& job_id);

}  // namespace tpshard
