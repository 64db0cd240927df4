//! The CRI RuntimeService. This first step serves what needs no pod: Version, Status,
//! RuntimeConfig and UpdateRuntimeConfig; every other method answers Unimplemented, naming
//! itself, until its step lands.

use tonic::{Request, Response, Status};

use crate::api::runtime_service_server::RuntimeService;
use crate::api::*;
use crate::engines::Engines;

/// The RuntimeService.
pub struct Runtime {
    engines: Engines,
}

impl Runtime {
    /// Serve the engines' pods and containers.
    pub fn new(engines: Engines) -> Runtime {
        Runtime { engines }
    }
}

type Stream<T> = std::pin::Pin<Box<dyn tokio_stream::Stream<Item = Result<T, Status>> + Send>>;

/// The answer of a method whose step has not landed yet.
fn not_yet(method: &str) -> Status {
    Status::unimplemented(format!("{method} is not implemented yet"))
}

fn condition(kind: &str, ready: bool, reason: &str, message: &str) -> RuntimeCondition {
    RuntimeCondition {
        r#type: kind.to_string(),
        status: ready,
        reason: reason.to_string(),
        message: message.to_string(),
    }
}

#[tonic::async_trait]
impl RuntimeService for Runtime {
    async fn version(
        &self,
        _request: Request<VersionRequest>,
    ) -> Result<Response<VersionResponse>, Status> {
        Ok(Response::new(VersionResponse {
            version: "0.1.0".into(),
            runtime_name: crate::RUNTIME_NAME.into(),
            runtime_version: env!("CARGO_PKG_VERSION").into(),
            runtime_api_version: crate::CRI_VERSION.into(),
        }))
    }

    async fn status(
        &self,
        request: Request<StatusRequest>,
    ) -> Result<Response<StatusResponse>, Status> {
        let verbose = request.into_inner().verbose;
        // The runtime is ready when the engine opens (its store, its directories).
        let runtime = self.engines.call(|_| Ok(())).await;
        let runtime_ready = match &runtime {
            Ok(()) => condition("RuntimeReady", true, "", ""),
            Err(e) => condition("RuntimeReady", false, "EngineUnavailable", e.message()),
        };
        // The network is not served through the CRI yet: kubelet must not schedule pods.
        let network_ready = condition(
            "NetworkReady",
            false,
            "NetworkPluginNotReady",
            "pod sandboxes are not served through the CRI yet",
        );
        let mut info = std::collections::HashMap::new();
        if verbose {
            info.insert(
                "config".to_string(),
                serde_json::json!({"cgroupDriver": "cgroupfs"}).to_string(),
            );
        }
        Ok(Response::new(StatusResponse {
            status: Some(RuntimeStatus {
                conditions: vec![runtime_ready, network_ready],
            }),
            info,
            runtime_handlers: vec![RuntimeHandler {
                name: String::new(),
                features: Some(RuntimeHandlerFeatures::default()),
            }],
            features: Some(RuntimeFeatures::default()),
        }))
    }

    async fn update_runtime_config(
        &self,
        _request: Request<UpdateRuntimeConfigRequest>,
    ) -> Result<Response<UpdateRuntimeConfigResponse>, Status> {
        // kubelet sends the pod CIDR; the built-in network and CNI take theirs from their
        // own configuration, as with containerd's CNI plugin.
        Ok(Response::new(UpdateRuntimeConfigResponse {}))
    }

    async fn runtime_config(
        &self,
        _request: Request<RuntimeConfigRequest>,
    ) -> Result<Response<RuntimeConfigResponse>, Status> {
        Ok(Response::new(RuntimeConfigResponse {
            linux: Some(LinuxRuntimeConfiguration {
                cgroup_driver: CgroupDriver::Cgroupfs as i32,
            }),
        }))
    }

    async fn run_pod_sandbox(
        &self,
        _request: Request<RunPodSandboxRequest>,
    ) -> Result<Response<RunPodSandboxResponse>, Status> {
        Err(not_yet("RunPodSandbox"))
    }
    async fn stop_pod_sandbox(
        &self,
        _request: Request<StopPodSandboxRequest>,
    ) -> Result<Response<StopPodSandboxResponse>, Status> {
        Err(not_yet("StopPodSandbox"))
    }
    async fn remove_pod_sandbox(
        &self,
        _request: Request<RemovePodSandboxRequest>,
    ) -> Result<Response<RemovePodSandboxResponse>, Status> {
        Err(not_yet("RemovePodSandbox"))
    }
    async fn pod_sandbox_status(
        &self,
        _request: Request<PodSandboxStatusRequest>,
    ) -> Result<Response<PodSandboxStatusResponse>, Status> {
        Err(not_yet("PodSandboxStatus"))
    }
    async fn list_pod_sandbox(
        &self,
        _request: Request<ListPodSandboxRequest>,
    ) -> Result<Response<ListPodSandboxResponse>, Status> {
        Err(not_yet("ListPodSandbox"))
    }
    async fn create_container(
        &self,
        _request: Request<CreateContainerRequest>,
    ) -> Result<Response<CreateContainerResponse>, Status> {
        Err(not_yet("CreateContainer"))
    }
    async fn start_container(
        &self,
        _request: Request<StartContainerRequest>,
    ) -> Result<Response<StartContainerResponse>, Status> {
        Err(not_yet("StartContainer"))
    }
    async fn stop_container(
        &self,
        _request: Request<StopContainerRequest>,
    ) -> Result<Response<StopContainerResponse>, Status> {
        Err(not_yet("StopContainer"))
    }
    async fn remove_container(
        &self,
        _request: Request<RemoveContainerRequest>,
    ) -> Result<Response<RemoveContainerResponse>, Status> {
        Err(not_yet("RemoveContainer"))
    }
    async fn list_containers(
        &self,
        _request: Request<ListContainersRequest>,
    ) -> Result<Response<ListContainersResponse>, Status> {
        Err(not_yet("ListContainers"))
    }
    async fn container_status(
        &self,
        _request: Request<ContainerStatusRequest>,
    ) -> Result<Response<ContainerStatusResponse>, Status> {
        Err(not_yet("ContainerStatus"))
    }
    async fn update_container_resources(
        &self,
        _request: Request<UpdateContainerResourcesRequest>,
    ) -> Result<Response<UpdateContainerResourcesResponse>, Status> {
        Err(not_yet("UpdateContainerResources"))
    }
    async fn reopen_container_log(
        &self,
        _request: Request<ReopenContainerLogRequest>,
    ) -> Result<Response<ReopenContainerLogResponse>, Status> {
        Err(not_yet("ReopenContainerLog"))
    }
    async fn exec_sync(
        &self,
        _request: Request<ExecSyncRequest>,
    ) -> Result<Response<ExecSyncResponse>, Status> {
        Err(not_yet("ExecSync"))
    }
    async fn exec(&self, _request: Request<ExecRequest>) -> Result<Response<ExecResponse>, Status> {
        Err(not_yet("Exec"))
    }
    async fn attach(
        &self,
        _request: Request<AttachRequest>,
    ) -> Result<Response<AttachResponse>, Status> {
        Err(not_yet("Attach"))
    }
    async fn port_forward(
        &self,
        _request: Request<PortForwardRequest>,
    ) -> Result<Response<PortForwardResponse>, Status> {
        Err(not_yet("PortForward"))
    }
    async fn container_stats(
        &self,
        _request: Request<ContainerStatsRequest>,
    ) -> Result<Response<ContainerStatsResponse>, Status> {
        Err(not_yet("ContainerStats"))
    }
    async fn list_container_stats(
        &self,
        _request: Request<ListContainerStatsRequest>,
    ) -> Result<Response<ListContainerStatsResponse>, Status> {
        Err(not_yet("ListContainerStats"))
    }
    async fn pod_sandbox_stats(
        &self,
        _request: Request<PodSandboxStatsRequest>,
    ) -> Result<Response<PodSandboxStatsResponse>, Status> {
        Err(not_yet("PodSandboxStats"))
    }
    async fn list_pod_sandbox_stats(
        &self,
        _request: Request<ListPodSandboxStatsRequest>,
    ) -> Result<Response<ListPodSandboxStatsResponse>, Status> {
        Err(not_yet("ListPodSandboxStats"))
    }
    async fn checkpoint_container(
        &self,
        _request: Request<CheckpointContainerRequest>,
    ) -> Result<Response<CheckpointContainerResponse>, Status> {
        Err(not_yet("CheckpointContainer"))
    }
    async fn list_metric_descriptors(
        &self,
        _request: Request<ListMetricDescriptorsRequest>,
    ) -> Result<Response<ListMetricDescriptorsResponse>, Status> {
        Err(not_yet("ListMetricDescriptors"))
    }
    async fn list_pod_sandbox_metrics(
        &self,
        _request: Request<ListPodSandboxMetricsRequest>,
    ) -> Result<Response<ListPodSandboxMetricsResponse>, Status> {
        Err(not_yet("ListPodSandboxMetrics"))
    }
    async fn update_pod_sandbox_resources(
        &self,
        _request: Request<UpdatePodSandboxResourcesRequest>,
    ) -> Result<Response<UpdatePodSandboxResourcesResponse>, Status> {
        Err(not_yet("UpdatePodSandboxResources"))
    }

    type StreamPodSandboxesStream = Stream<StreamPodSandboxesResponse>;
    async fn stream_pod_sandboxes(
        &self,
        _request: Request<StreamPodSandboxesRequest>,
    ) -> Result<Response<Self::StreamPodSandboxesStream>, Status> {
        Err(not_yet("StreamPodSandboxes"))
    }

    type StreamContainersStream = Stream<StreamContainersResponse>;
    async fn stream_containers(
        &self,
        _request: Request<StreamContainersRequest>,
    ) -> Result<Response<Self::StreamContainersStream>, Status> {
        Err(not_yet("StreamContainers"))
    }

    type StreamContainerStatsStream = Stream<StreamContainerStatsResponse>;
    async fn stream_container_stats(
        &self,
        _request: Request<StreamContainerStatsRequest>,
    ) -> Result<Response<Self::StreamContainerStatsStream>, Status> {
        Err(not_yet("StreamContainerStats"))
    }

    type StreamPodSandboxStatsStream = Stream<StreamPodSandboxStatsResponse>;
    async fn stream_pod_sandbox_stats(
        &self,
        _request: Request<StreamPodSandboxStatsRequest>,
    ) -> Result<Response<Self::StreamPodSandboxStatsStream>, Status> {
        Err(not_yet("StreamPodSandboxStats"))
    }

    type GetContainerEventsStream = Stream<ContainerEventResponse>;
    async fn get_container_events(
        &self,
        _request: Request<GetEventsRequest>,
    ) -> Result<Response<Self::GetContainerEventsStream>, Status> {
        Err(not_yet("GetContainerEvents"))
    }

    type StreamPodSandboxMetricsStream = Stream<StreamPodSandboxMetricsResponse>;
    async fn stream_pod_sandbox_metrics(
        &self,
        _request: Request<StreamPodSandboxMetricsRequest>,
    ) -> Result<Response<Self::StreamPodSandboxMetricsStream>, Status> {
        Err(not_yet("StreamPodSandboxMetrics"))
    }
}
