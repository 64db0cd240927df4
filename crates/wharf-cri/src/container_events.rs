//! GetContainerEvents: the stream kubelet's evented PLEG reads. Each subscriber gets a
//! thread with an engine of its own following the engine's event feed, which is pushed
//! (shims report exits as they happen, commands wake it through the store's stamp), so
//! nothing here polls. Each container event carries its pod's status and the pod's
//! containers' statuses, as containerd sends them.

use std::time::SystemTime;

use tokio::sync::mpsc;
use tonic::Status;
use wharf_engine::db::Event;
use wharf_engine::{Engine, EngineOptions, EventOptions};

use crate::api::*;
use crate::log::{Level, log};

/// The CRI event an engine event is, if it is one.
fn kind(e: &Event) -> Option<ContainerEventType> {
    if e.object != "container" {
        return None;
    }
    Some(match e.kind_of_event.as_str() {
        "created" => ContainerEventType::ContainerCreatedEvent,
        "started" => ContainerEventType::ContainerStartedEvent,
        "exited" | "died" => ContainerEventType::ContainerStoppedEvent,
        "removed" => ContainerEventType::ContainerDeletedEvent,
        _ => return None,
    })
}

fn event(engine: &Engine, e: &Event, kind: ContainerEventType) -> ContainerEventResponse {
    // The container (gone once deleted) and its pod as they are now.
    let row = engine.container(&e.id).ok().map(|c| c.row);
    let pod_id = row.as_ref().map(|r| r.pod_id.clone()).or_else(|| {
        e.attrs
            .get("pod_id")
            .and_then(|p| p.as_str())
            .map(String::from)
    });
    let pod = pod_id.and_then(|p| engine.pod(&p).ok());
    // Each of the pod's containers as ContainerStatus shows it (one refresh each).
    let containers_statuses = pod
        .iter()
        .flat_map(|p| &p.containers)
        .filter_map(|(id, _, _)| engine.container_status(id).ok())
        .map(|st| crate::containers::container_status(&st))
        .collect();
    ContainerEventResponse {
        container_id: e.id.clone(),
        container_event_type: kind as i32,
        created_at: crate::meta::nanos(Some(&e.time)),
        pod_sandbox_status: pod
            .as_ref()
            .map(|p| crate::sandboxes::sandbox_status(&p.row)),
        containers_statuses,
    }
}

/// Start following the engine's events for one subscriber.
pub fn subscribe(opts: EngineOptions) -> mpsc::Receiver<Result<ContainerEventResponse, Status>> {
    let (tx, rx) = mpsc::channel(256);
    let since = SystemTime::now();
    std::thread::spawn(move || {
        let engine = match Engine::open(opts) {
            Ok(e) => e,
            Err(err) => {
                let _ = tx.blocking_send(Err(crate::status::from_engine(err)));
                return;
            }
        };
        let mut feed = engine.events(EventOptions {
            since: Some(since),
            follow: true,
        });
        loop {
            let batch = match feed.next_batch() {
                Ok(Some(b)) => b,
                Ok(None) => return,
                Err(err) => {
                    log(
                        Level::Error,
                        "container events ended",
                        &[("error", &err.to_string())],
                    );
                    let _ = tx.blocking_send(Err(crate::status::from_engine(err)));
                    return;
                }
            };
            for e in &batch {
                let Some(k) = kind(e) else { continue };
                let resp = event(&engine, e, k);
                engine.release_pod_locks();
                if tx.blocking_send(Ok(resp)).is_err() {
                    // The subscriber went away.
                    return;
                }
            }
        }
    });
    rx
}
