//! The CRI RuntimeService: each method hands its request to the module that translates it
//! ([`crate::sandboxes`], [`crate::containers`], [`crate::exec_sync`], [`crate::stats`],
//! [`crate::container_events`]) and runs it with an engine ([`crate::engines`]). Methods
//! whose step has not landed (the streaming ones: Exec, Attach, PortForward) answer
//! Unimplemented, naming themselves.

use tonic::{Request, Response, Status};

use crate::api::runtime_service_server::RuntimeService;
use crate::api::*;
use crate::engines::Engines;
use crate::log::{Level, log};
use crate::status::from_engine;

/// The RuntimeService.
pub struct Runtime {
    engines: Engines,
    config: crate::config::DaemonConfig,
    streams: std::sync::Arc<crate::streaming::StreamServer>,
}

impl Runtime {
    /// Serve the engines' pods and containers.
    pub fn new(
        engines: Engines,
        config: crate::config::DaemonConfig,
        streams: std::sync::Arc<crate::streaming::StreamServer>,
    ) -> Runtime {
        Runtime {
            engines,
            config,
            streams,
        }
    }

    /// A stream URL for a running container's process.
    async fn stream_url(
        &self,
        method: &'static str,
        container: String,
        streams: crate::stream_process::Streams,
        pending: crate::stream_process::Pending,
    ) -> Result<String, Status> {
        streams.check(method)?;
        let running = self
            .call(method, move |e| {
                let c = e.container(&container).map_err(from_engine)?;
                Ok(c.row.state == wharf_engine::model::ContainerState::Running)
            })
            .await?
            .into_inner();
        if !running {
            return Err(Status::failed_precondition(format!(
                "{method}: the container is not running"
            )));
        }
        let kind = if method == "Exec" { "exec" } else { "attach" };
        Ok(self.streams.url(kind, pending))
    }

    /// Run `f` with an engine; log the call (debug) and its failure (info: kubelet retries
    /// and reports it, the log says why).
    async fn call<T: Send + 'static>(
        &self,
        method: &'static str,
        f: impl FnOnce(&wharf_engine::Engine) -> Result<T, Status> + Send + 'static,
    ) -> Result<Response<T>, Status> {
        log(Level::Debug, "request", &[("method", method)]);
        let t = std::time::Instant::now();
        let r = self.engines.call(f).await;
        let code = r.as_ref().map_or_else(|s| s.code(), |_| tonic::Code::Ok);
        crate::metrics::request(method, code, t.elapsed());
        match r {
            Ok(r) => Ok(Response::new(r)),
            Err(status) => {
                log(
                    Level::Info,
                    "request failed",
                    &[
                        ("method", method),
                        ("code", &format!("{:?}", status.code())),
                        ("error", status.message()),
                    ],
                );
                Err(status)
            }
        }
    }
}

type Stream<T> = std::pin::Pin<Box<dyn tokio_stream::Stream<Item = Result<T, Status>> + Send>>;

/// A stream of one message: the streaming list calls answer with everything in one batch
/// (kubelet reads until the stream ends).
fn one<T: Send + 'static>(item: T) -> Response<Stream<T>> {
    Response::new(Box::pin(tokio_stream::once(Ok(item))))
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
        let _m = crate::metrics::Timer::new("Version");
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
        let _m = crate::metrics::Timer::new("Status");
        let verbose = request.into_inner().verbose;
        // The runtime is ready when the engine opens (its store, its directories).
        let runtime = self.engines.call(|_| Ok(())).await;
        let runtime_ready = match &runtime {
            Ok(()) => condition("RuntimeReady", true, "", ""),
            Err(e) => condition("RuntimeReady", false, "EngineUnavailable", e.message()),
        };
        // The network is ready when the pods' default network can be opened (its CNI
        // configuration found and valid, or the built-in bridge).
        let network = self
            .engines
            .call(|e| {
                Ok(wharf_engine::sandbox::network(
                    e.paths(),
                    &e.options().net,
                    &wharf_engine::model::NetworkMode::Default,
                )
                .map(|n| n.map(|n| n.name().to_string())))
            })
            .await;
        let network_ready = match network {
            Ok(Ok(Some(_))) => condition("NetworkReady", true, "", ""),
            Ok(Ok(None)) => condition(
                "NetworkReady",
                false,
                "NetworkPluginNotReady",
                "no default network is configured",
            ),
            Ok(Err(e)) => condition(
                "NetworkReady",
                false,
                "NetworkPluginNotReady",
                &format!("the default network cannot be used: {e}"),
            ),
            Err(e) => condition("NetworkReady", false, "NetworkPluginNotReady", e.message()),
        };
        let mut info = std::collections::HashMap::new();
        if verbose {
            let engine = self.engines.options();
            info.insert(
                "config".to_string(),
                serde_json::json!({
                    "cgroupDriver": engine.cgroup_driver.as_str(),
                    "sandboxImage": self.config.sandbox_image,
                    "streamAddress": self.config.stream_address,
                    "metricsAddress": self.config.metrics_address,
                    "restrictOOMScoreAdj": self.config.restrict_oom_score_adj.unwrap_or(false),
                    "engine": {
                        "root": engine.root,
                        "run": engine.run,
                        "cgroupParent": engine.cgroup_parent,
                    },
                })
                .to_string(),
            );
        }
        Ok(Response::new(StatusResponse {
            status: Some(RuntimeStatus {
                conditions: vec![runtime_ready, network_ready],
            }),
            info,
            // The default handler and the configured names for it, with the same features.
            // Recursive read-only mounts: the runtime's "rro" (mount_setattr, which every
            // kernel Wharf runs on has). User namespaces: pods with their own (mode POD),
            // their volumes id-mapped.
            runtime_handlers: std::iter::once(String::new())
                .chain(self.config.runtime_handlers.iter().flatten().cloned())
                .map(|name| RuntimeHandler {
                    name,
                    features: Some(RuntimeHandlerFeatures {
                        recursive_read_only_mounts: true,
                        user_namespaces: true,
                    }),
                })
                .collect(),
            features: Some(RuntimeFeatures {
                supplemental_groups_policy: true,
                user_namespaces_host_network: false,
            }),
        }))
    }

    async fn update_runtime_config(
        &self,
        _request: Request<UpdateRuntimeConfigRequest>,
    ) -> Result<Response<UpdateRuntimeConfigResponse>, Status> {
        let _m = crate::metrics::Timer::new("UpdateRuntimeConfig");
        // kubelet sends the pod CIDR; the built-in network and CNI take theirs from their
        // own configuration, as with containerd's CNI plugin.
        Ok(Response::new(UpdateRuntimeConfigResponse {}))
    }

    async fn runtime_config(
        &self,
        _request: Request<RuntimeConfigRequest>,
    ) -> Result<Response<RuntimeConfigResponse>, Status> {
        let _m = crate::metrics::Timer::new("RuntimeConfig");
        Ok(Response::new(RuntimeConfigResponse {
            linux: Some(LinuxRuntimeConfiguration {
                cgroup_driver: match self.engines.options().cgroup_driver {
                    wharf_engine::cgroup_driver::CgroupDriver::Cgroupfs => CgroupDriver::Cgroupfs,
                    wharf_engine::cgroup_driver::CgroupDriver::Systemd => CgroupDriver::Systemd,
                } as i32,
            }),
        }))
    }

    async fn run_pod_sandbox(
        &self,
        request: Request<RunPodSandboxRequest>,
    ) -> Result<Response<RunPodSandboxResponse>, Status> {
        let req = request.into_inner();
        let handlers = self.config.runtime_handlers.clone().unwrap_or_default();
        self.call("RunPodSandbox", move |e| {
            crate::sandboxes::run(e, req, &handlers)
        })
        .await
    }
    async fn stop_pod_sandbox(
        &self,
        request: Request<StopPodSandboxRequest>,
    ) -> Result<Response<StopPodSandboxResponse>, Status> {
        let id = request.into_inner().pod_sandbox_id;
        self.call("StopPodSandbox", move |e| crate::sandboxes::stop(e, &id))
            .await
            .map(|_| Response::new(StopPodSandboxResponse {}))
    }
    async fn remove_pod_sandbox(
        &self,
        request: Request<RemovePodSandboxRequest>,
    ) -> Result<Response<RemovePodSandboxResponse>, Status> {
        let id = request.into_inner().pod_sandbox_id;
        self.call("RemovePodSandbox", move |e| {
            crate::sandboxes::remove(e, &id)
        })
        .await
        .map(|_| Response::new(RemovePodSandboxResponse {}))
    }
    async fn pod_sandbox_status(
        &self,
        request: Request<PodSandboxStatusRequest>,
    ) -> Result<Response<PodSandboxStatusResponse>, Status> {
        let req = request.into_inner();
        self.call("PodSandboxStatus", move |e| {
            crate::sandboxes::status(e, req)
        })
        .await
    }
    async fn list_pod_sandbox(
        &self,
        request: Request<ListPodSandboxRequest>,
    ) -> Result<Response<ListPodSandboxResponse>, Status> {
        let req = request.into_inner();
        let l = self.engines.listings();
        // kubelet asks every second, and mostly nothing changed: answered here from what
        // is kept, or through the engine where that went stale.
        if let Some(pods) = l.kept_pods() {
            let _m = crate::metrics::Timer::new("ListPodSandbox");
            return Ok(Response::new(crate::sandboxes::answer(&pods, req)));
        }
        self.call("ListPodSandbox", move |e| {
            crate::sandboxes::list(e, &l, req)
        })
        .await
    }
    async fn create_container(
        &self,
        request: Request<CreateContainerRequest>,
    ) -> Result<Response<CreateContainerResponse>, Status> {
        let req = request.into_inner();
        self.call("CreateContainer", move |e| {
            crate::containers::create(e, req)
        })
        .await
    }
    async fn start_container(
        &self,
        request: Request<StartContainerRequest>,
    ) -> Result<Response<StartContainerResponse>, Status> {
        let id = request.into_inner().container_id;
        self.call("StartContainer", move |e| crate::containers::start(e, &id))
            .await
            .map(|_| Response::new(StartContainerResponse {}))
    }
    async fn stop_container(
        &self,
        request: Request<StopContainerRequest>,
    ) -> Result<Response<StopContainerResponse>, Status> {
        let req = request.into_inner();
        self.call("StopContainer", move |e| {
            crate::containers::stop(e, &req.container_id, req.timeout)
        })
        .await
        .map(|_| Response::new(StopContainerResponse {}))
    }
    async fn remove_container(
        &self,
        request: Request<RemoveContainerRequest>,
    ) -> Result<Response<RemoveContainerResponse>, Status> {
        let id = request.into_inner().container_id;
        self.call("RemoveContainer", move |e| {
            crate::containers::remove(e, &id)
        })
        .await
        .map(|_| Response::new(RemoveContainerResponse {}))
    }
    async fn list_containers(
        &self,
        request: Request<ListContainersRequest>,
    ) -> Result<Response<ListContainersResponse>, Status> {
        let req = request.into_inner();
        let l = self.engines.listings();
        if let Some(containers) = l.kept_containers() {
            let _m = crate::metrics::Timer::new("ListContainers");
            return Ok(Response::new(crate::containers::answer(&containers, req)));
        }
        self.call("ListContainers", move |e| {
            crate::containers::list(e, &l, req)
        })
        .await
    }
    async fn container_status(
        &self,
        request: Request<ContainerStatusRequest>,
    ) -> Result<Response<ContainerStatusResponse>, Status> {
        let req = request.into_inner();
        self.call("ContainerStatus", move |e| {
            crate::containers::status(e, req)
        })
        .await
    }
    async fn update_container_resources(
        &self,
        request: Request<UpdateContainerResourcesRequest>,
    ) -> Result<Response<UpdateContainerResourcesResponse>, Status> {
        let req = request.into_inner();
        self.call("UpdateContainerResources", move |e| {
            let res = crate::containers::linux_resources(req.linux.unwrap_or_default());
            e.update_resources(&req.container_id, &res)
                .map_err(from_engine)
        })
        .await
        .map(|_| Response::new(UpdateContainerResourcesResponse {}))
    }
    async fn reopen_container_log(
        &self,
        request: Request<ReopenContainerLogRequest>,
    ) -> Result<Response<ReopenContainerLogResponse>, Status> {
        let id = request.into_inner().container_id;
        self.call("ReopenContainerLog", move |e| {
            e.reopen_log(&id).map_err(from_engine)
        })
        .await
        .map(|_| Response::new(ReopenContainerLogResponse {}))
    }
    async fn exec_sync(
        &self,
        request: Request<ExecSyncRequest>,
    ) -> Result<Response<ExecSyncResponse>, Status> {
        let req = request.into_inner();
        self.call("ExecSync", move |e| crate::exec_sync::exec_sync(e, req))
            .await
    }
    async fn exec(&self, request: Request<ExecRequest>) -> Result<Response<ExecResponse>, Status> {
        let req = request.into_inner();
        if req.cmd.is_empty() {
            return Err(Status::invalid_argument("Exec: no command given"));
        }
        let streams = crate::stream_process::Streams {
            tty: req.tty,
            stdin: req.stdin,
            stdout: req.stdout,
            stderr: req.stderr,
        };
        let pending = crate::stream_process::Pending::Exec {
            container: req.container_id.clone(),
            cmd: req.cmd,
            streams,
        };
        let url = self
            .stream_url("Exec", req.container_id, streams, pending)
            .await?;
        Ok(Response::new(ExecResponse { url }))
    }
    async fn attach(
        &self,
        request: Request<AttachRequest>,
    ) -> Result<Response<AttachResponse>, Status> {
        let req = request.into_inner();
        let streams = crate::stream_process::Streams {
            tty: req.tty,
            stdin: req.stdin,
            stdout: req.stdout,
            stderr: req.stderr,
        };
        let pending = crate::stream_process::Pending::Attach {
            container: req.container_id.clone(),
            streams,
        };
        let url = self
            .stream_url("Attach", req.container_id, streams, pending)
            .await?;
        Ok(Response::new(AttachResponse { url }))
    }
    async fn port_forward(
        &self,
        request: Request<PortForwardRequest>,
    ) -> Result<Response<PortForwardResponse>, Status> {
        let req = request.into_inner();
        let id = req.pod_sandbox_id.clone();
        let netns = self
            .call("PortForward", move |e| {
                let pod = e.pod(&id).map_err(from_engine)?.row;
                if !pod.state.ready() {
                    return Err(Status::failed_precondition(format!(
                        "PortForward: pod sandbox {} is not ready ({})",
                        pod.id, pod.state
                    )));
                }
                Ok(pod.sandbox.netns.map(std::path::PathBuf::from))
            })
            .await?
            .into_inner();
        let url = self.streams.url(
            "portforward",
            crate::stream_process::Pending::PortForward { netns },
        );
        Ok(Response::new(PortForwardResponse { url }))
    }
    async fn container_stats(
        &self,
        request: Request<ContainerStatsRequest>,
    ) -> Result<Response<ContainerStatsResponse>, Status> {
        let id = request.into_inner().container_id;
        let r = self.engines.rates();
        self.call("ContainerStats", move |e| {
            let row = crate::containers::row(e, &id)?;
            Ok(ContainerStatsResponse {
                stats: Some(crate::stats::container_stats(e, &r, &row)?),
            })
        })
        .await
    }
    async fn list_container_stats(
        &self,
        request: Request<ListContainerStatsRequest>,
    ) -> Result<Response<ListContainerStatsResponse>, Status> {
        let f = request.into_inner().filter.unwrap_or_default();
        let (l, r) = (self.engines.listings(), self.engines.rates());
        self.call("ListContainerStats", move |e| {
            Ok(ListContainerStatsResponse {
                stats: crate::stats::list_containers(e, &l, &r, f)?,
            })
        })
        .await
    }
    async fn pod_sandbox_stats(
        &self,
        request: Request<PodSandboxStatsRequest>,
    ) -> Result<Response<PodSandboxStatsResponse>, Status> {
        let id = request.into_inner().pod_sandbox_id;
        let r = self.engines.rates();
        self.call("PodSandboxStats", move |e| {
            let pod = e.pod(&id).map_err(from_engine)?.row;
            Ok(PodSandboxStatsResponse {
                stats: Some(crate::stats::pod_stats(e, &r, &pod)?),
            })
        })
        .await
    }
    async fn list_pod_sandbox_stats(
        &self,
        request: Request<ListPodSandboxStatsRequest>,
    ) -> Result<Response<ListPodSandboxStatsResponse>, Status> {
        let f = request.into_inner().filter.unwrap_or_default();
        let (l, r) = (self.engines.listings(), self.engines.rates());
        self.call("ListPodSandboxStats", move |e| {
            Ok(ListPodSandboxStatsResponse {
                stats: crate::stats::list_pods(e, &l, &r, f)?,
            })
        })
        .await
    }
    async fn checkpoint_container(
        &self,
        request: Request<CheckpointContainerRequest>,
    ) -> Result<Response<CheckpointContainerResponse>, Status> {
        let id = request.into_inner().container_id;
        Err(Status::unimplemented(format!(
            "CheckpointContainer of {id}: checkpointing (CRIU) is not supported by Wharf"
        )))
    }
    async fn list_metric_descriptors(
        &self,
        request: Request<ListMetricDescriptorsRequest>,
    ) -> Result<Response<ListMetricDescriptorsResponse>, Status> {
        let _ = request;
        Ok(Response::new(ListMetricDescriptorsResponse {
            descriptors: crate::pod_metrics::descriptors(),
        }))
    }
    async fn list_pod_sandbox_metrics(
        &self,
        request: Request<ListPodSandboxMetricsRequest>,
    ) -> Result<Response<ListPodSandboxMetricsResponse>, Status> {
        let _ = request;
        let l = self.engines.listings();
        self.call("ListPodSandboxMetrics", move |e| {
            Ok(ListPodSandboxMetricsResponse {
                pod_metrics: crate::pod_metrics::list(e, &l)?,
            })
        })
        .await
    }
    async fn update_pod_sandbox_resources(
        &self,
        request: Request<UpdatePodSandboxResourcesRequest>,
    ) -> Result<Response<UpdatePodSandboxResourcesResponse>, Status> {
        // kubelet resizes the pod's own cgroup (which Wharf's pod cgroup is below) itself;
        // nothing of the pod's is Wharf's to change.
        let _ = request;
        Ok(Response::new(UpdatePodSandboxResourcesResponse {}))
    }

    type StreamPodSandboxesStream = Stream<StreamPodSandboxesResponse>;
    async fn stream_pod_sandboxes(
        &self,
        request: Request<StreamPodSandboxesRequest>,
    ) -> Result<Response<Self::StreamPodSandboxesStream>, Status> {
        let req = ListPodSandboxRequest {
            filter: request.into_inner().filter,
        };
        let l = self.engines.listings();
        let r = self
            .call("StreamPodSandboxes", move |e| {
                crate::sandboxes::list(e, &l, req)
            })
            .await?
            .into_inner();
        Ok(one(StreamPodSandboxesResponse {
            pod_sandboxes: r.items,
        }))
    }

    type StreamContainersStream = Stream<StreamContainersResponse>;
    async fn stream_containers(
        &self,
        request: Request<StreamContainersRequest>,
    ) -> Result<Response<Self::StreamContainersStream>, Status> {
        let req = ListContainersRequest {
            filter: request.into_inner().filter,
        };
        let l = self.engines.listings();
        let r = self
            .call("StreamContainers", move |e| {
                crate::containers::list(e, &l, req)
            })
            .await?
            .into_inner();
        Ok(one(StreamContainersResponse {
            containers: r.containers,
        }))
    }

    type StreamContainerStatsStream = Stream<StreamContainerStatsResponse>;
    async fn stream_container_stats(
        &self,
        request: Request<StreamContainerStatsRequest>,
    ) -> Result<Response<Self::StreamContainerStatsStream>, Status> {
        let f = request.into_inner().filter.unwrap_or_default();
        let (l, r) = (self.engines.listings(), self.engines.rates());
        let stats = self
            .call("StreamContainerStats", move |e| {
                crate::stats::list_containers(e, &l, &r, f)
            })
            .await?
            .into_inner();
        Ok(one(StreamContainerStatsResponse {
            container_stats: stats,
        }))
    }

    type StreamPodSandboxStatsStream = Stream<StreamPodSandboxStatsResponse>;
    async fn stream_pod_sandbox_stats(
        &self,
        request: Request<StreamPodSandboxStatsRequest>,
    ) -> Result<Response<Self::StreamPodSandboxStatsStream>, Status> {
        let f = request.into_inner().filter.unwrap_or_default();
        let (l, r) = (self.engines.listings(), self.engines.rates());
        let stats = self
            .call("StreamPodSandboxStats", move |e| {
                crate::stats::list_pods(e, &l, &r, f)
            })
            .await?
            .into_inner();
        Ok(one(StreamPodSandboxStatsResponse {
            pod_sandbox_stats: stats,
        }))
    }

    type GetContainerEventsStream = Stream<ContainerEventResponse>;
    async fn get_container_events(
        &self,
        request: Request<GetEventsRequest>,
    ) -> Result<Response<Self::GetContainerEventsStream>, Status> {
        let _ = request;
        let rx = crate::container_events::subscribe(self.engines.options());
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }

    type StreamPodSandboxMetricsStream = Stream<StreamPodSandboxMetricsResponse>;
    async fn stream_pod_sandbox_metrics(
        &self,
        _request: Request<StreamPodSandboxMetricsRequest>,
    ) -> Result<Response<Self::StreamPodSandboxMetricsStream>, Status> {
        let l = self.engines.listings();
        let metrics = self
            .call("StreamPodSandboxMetrics", move |e| {
                crate::pod_metrics::list(e, &l)
            })
            .await?
            .into_inner();
        Ok(one(StreamPodSandboxMetricsResponse {
            pod_sandbox_metrics: metrics,
        }))
    }
}
