//! The shape of a container's cgroup usage and limits, as the engine's stats queries
//! return them ([`Engine::container_stats`](crate::Engine::container_stats),
//! [`ContainerUsage`](crate::ContainerUsage)). Front ends read these values (the CRI's
//! stats and cAdvisor metrics, `wharf stats`, the Docker API's stats) and name them from
//! here: the cgroups they are read from are the engine's business.

pub use wharf_runtime::cgroups::stats::{
    Blkio, BlkioEntry, Cpu, CpuUsage, Hugetlb, Memory, MemoryEntry, Pids, Psi, PsiData, Throttling,
};
pub use wharf_runtime::cgroups::{Limits, Stats};
