//! `POST /containers/{id}/exec`, `POST /exec/{id}/start`, `GET /exec/{id}/json` and
//! `POST /exec/{id}/resize`: docker's two-step exec. An exec instance is the daemon's
//! (kept in memory, as docker keeps them), its process the engine's.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use hyper::StatusCode;
use serde::Deserialize;
use serde_json::json;

use super::Api;
use super::http::{self, ApiError, Reply, Req};
use super::streams::{self, Relay};
use crate::stream_process::Input;

/// The body of `POST /containers/{id}/exec`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
struct ExecConfig {
    attach_stdin: bool,
    attach_stdout: bool,
    attach_stderr: bool,
    detach_keys: String,
    tty: bool,
    env: Option<Vec<String>>,
    cmd: Option<Vec<String>>,
    privileged: bool,
    user: String,
    working_dir: String,
}

/// The body of `POST /exec/{id}/start`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
struct StartConfig {
    detach: bool,
    tty: Option<bool>,
}

/// An exec instance.
#[derive(Debug, Clone)]
struct Instance {
    container: String,
    config: ExecConfig,
    running: bool,
    started: bool,
    exit_code: Option<i32>,
    /// Its terminal's size, and a way to change it, while it runs attached.
    input: Option<std::sync::mpsc::Sender<Input>>,
}

/// The exec instances, by id.
#[derive(Default)]
pub struct Execs(Mutex<HashMap<String, Instance>>);

impl Execs {
    fn get(&self, id: &str) -> Result<Instance, ApiError> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(id)
            .cloned()
            .ok_or_else(|| ApiError::not_found(format!("No such exec instance: {id}")))
    }

    fn update(&self, id: &str, f: impl FnOnce(&mut Instance)) {
        if let Some(i) = self.0.lock().unwrap_or_else(|e| e.into_inner()).get_mut(id) {
            f(i);
        }
    }
}

fn new_id() -> String {
    let mut raw = [0u8; 32];
    rustix::rand::getrandom(&mut raw, rustix::rand::GetRandomFlags::empty()).expect("getrandom");
    raw.iter().map(|b| format!("{b:02x}")).collect()
}

/// `POST /containers/{id}/exec`.
pub async fn create(api: &Arc<Api>, mut r: Req) -> Result<Reply, ApiError> {
    let key = r.param("id").to_string();
    let config: ExecConfig = r.json().await?;
    if config.cmd.as_ref().is_none_or(|c| c.is_empty()) {
        return Err(ApiError::bad("No exec command specified"));
    }
    streams::detach_keys(Some(&config.detach_keys))?;
    let container = api
        .engine(move |e| {
            let v = e.container(&key)?;
            if v.row.state != wharf_engine::model::ContainerState::Running {
                return Err(ApiError::conflict(format!(
                    "container {} is not running",
                    v.row.id
                )));
            }
            Ok(v.row.id)
        })
        .await?;
    let id = new_id();
    api.execs
        .0
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(
            id.clone(),
            Instance {
                container,
                config,
                running: false,
                started: false,
                exit_code: None,
                input: None,
            },
        );
    Ok(http::json_status(StatusCode::CREATED, &json!({"Id": id})))
}

/// `POST /exec/{id}/start`: detached, or hijacking the connection.
pub async fn start(api: &Arc<Api>, mut r: Req) -> Result<Reply, ApiError> {
    let id = r.param("id").to_string();
    let start: StartConfig = r.json().await?;
    let inst = api.execs.get(&id)?;
    if inst.started {
        return Err(ApiError::conflict(format!(
            "exec instance {id} has already been started"
        )));
    }
    let c = inst.config.clone();
    let tty = start.tty.unwrap_or(c.tty);
    let req = wharf_engine::ExecRequest {
        command: c.cmd.clone().unwrap_or_default(),
        env: c
            .env
            .iter()
            .flatten()
            .filter_map(|e| {
                e.split_once('=')
                    .map(|(k, v)| (k.to_string(), v.to_string()))
            })
            .collect(),
        user: Some(c.user.clone()).filter(|u| !u.is_empty()),
        workdir: Some(c.working_dir.clone()).filter(|w| !w.is_empty()),
        tty,
        stdin: c.attach_stdin && !start.detach,
        privileged: c.privileged,
    };
    let container = inst.container.clone();
    api.execs.update(&id, |i| {
        i.started = true;
        i.running = true;
    });
    if start.detach {
        let (container2, api2, id2) = (container.clone(), api.clone(), id.clone());
        let exec_id = api
            .engine(move |e| Ok(e.exec(&container, &req, false)?.0))
            .await
            .inspect_err(|_| api.execs.update(&id, |i| i.running = false))?;
        tokio::spawn(async move {
            let code = api2
                .engine(move |e| Ok(e.wait_exec(&container2, &exec_id, None)?.code))
                .await
                .unwrap_or(-1);
            api2.execs.update(&id2, |i| {
                i.running = false;
                i.exit_code = Some(code);
            });
        });
        return Ok(http::empty(StatusCode::OK));
    }
    streams::wants_upgrade(&r)?;
    let upgrade = r
        .upgrade
        .take()
        .ok_or_else(|| ApiError::internal("no upgrade"))?;
    let keys = streams::detach_keys(Some(&c.detach_keys))?;
    // Refused over HTTP while it still can be: a container that does not run.
    {
        let container = container.clone();
        let checked = api
            .engine(move |e| {
                let v = e.container(&container)?;
                if v.row.state != wharf_engine::model::ContainerState::Running {
                    return Err(ApiError::conflict(format!(
                        "container {} is not running",
                        v.row.id
                    )));
                }
                Ok(())
            })
            .await;
        if let Err(e) = checked {
            api.execs.update(&id, |i| i.running = false);
            return Err(e);
        }
    }
    let how = Relay {
        tty,
        stdin: c.attach_stdin,
        stdout: c.attach_stdout,
        stderr: c.attach_stderr,
        detach_keys: keys,
    };
    // The process starts once the connection is the client's: what it prints at once
    // then reaches a client still reading the 101's headers (docker-py reads the socket
    // past its HTTP buffer), as with docker, whose exec starts after the upgrade too.
    let (api2, id2) = (api.clone(), id.clone());
    tokio::spawn(async move {
        let Ok(io) = upgrade.await else {
            api2.execs.update(&id2, |i| i.running = false);
            return;
        };
        let container2 = container.clone();
        let started = api2
            .engine(move |e| match e.exec(&container2, &req, true) {
                Ok((_, s)) => Ok(Ok(s.expect("attached"))),
                Err(err) => {
                    use wharf_engine::error::ErrorKind as K;
                    // docker's: a program that cannot be run is told on the stream, its
                    // exit code 127 (not found) or 126 (not executable, a user unknown).
                    let code = match err.kind() {
                        K::ProgramNotFound => 127,
                        K::ProgramNotExecutable => 126,
                        _ => 126,
                    };
                    Ok(Err((code, format!("OCI runtime exec failed: {err}\n"))))
                }
            })
            .await;
        let session = match started {
            Ok(Ok(s)) => s,
            Ok(Err((code, message))) => return failed(&api2, &id2, io, tty, code, message).await,
            Err(e) => {
                return failed(&api2, &id2, io, tty, 126, format!("{}\n", e.message)).await;
            }
        };
        let exec_id = session.exec_id.clone();
        let (api3, id3) = (api2.clone(), id2.clone());
        let on_end = move |code: Option<i32>| {
            if let Some(c) = code {
                api3.execs.update(&id3, |i| {
                    i.running = false;
                    i.exit_code = Some(c);
                });
            }
        };
        let (api4, id4) = (api2.clone(), id2.clone());
        let on_start = move |tx: std::sync::mpsc::Sender<Input>| {
            api4.execs.update(&id4, |i| i.input = Some(tx));
        };
        let code = match streams::relay(io, session, how, on_start, on_end).await {
            Some(c) => c,
            None => match exec_id {
                Some(x) => api2
                    .engine(move |e| {
                        Ok(
                            e.wait_exec(&container, &x, Some(std::time::Duration::from_secs(5)))?
                                .code,
                        )
                    })
                    .await
                    .unwrap_or(-1),
                None => -1,
            },
        };
        api2.execs.update(&id2, |i| {
            i.running = false;
            i.exit_code = Some(code);
        });
    });
    Ok(streams::upgraded(tty))
}

/// An exec whose program could not run: its exit code recorded, the reason written to
/// the client, the connection closed.
async fn failed(
    api: &Arc<Api>,
    id: &str,
    io: hyper::upgrade::Upgraded,
    tty: bool,
    code: i32,
    message: String,
) {
    api.execs.update(id, |i| {
        i.running = false;
        i.exit_code = Some(code);
    });
    let mut io = hyper_util::rt::TokioIo::new(io);
    let data = if tty {
        bytes::Bytes::from(message)
    } else {
        super::containers::frame(1, message.as_bytes())
    };
    let _ = tokio::io::AsyncWriteExt::write_all(&mut io, &data).await;
    let _ = tokio::io::AsyncWriteExt::shutdown(&mut io).await;
}

/// `GET /exec/{id}/json`.
pub async fn inspect(api: &Arc<Api>, r: &Req) -> Result<Reply, ApiError> {
    let id = r.param("id");
    let i = api.execs.get(id)?;
    let cmd = i.config.cmd.clone().unwrap_or_default();
    Ok(http::json(&json!({
        "ID": id,
        "Running": i.running,
        "ExitCode": i.exit_code,
        "ProcessConfig": {
            "entrypoint": cmd.first().cloned().unwrap_or_default(),
            "arguments": cmd.get(1..).unwrap_or_default(),
            "tty": i.config.tty,
            "privileged": i.config.privileged,
            "user": i.config.user,
        },
        "OpenStdin": i.config.attach_stdin,
        "OpenStderr": i.config.attach_stderr,
        "OpenStdout": i.config.attach_stdout,
        "CanRemove": !i.running,
        "ContainerID": i.container,
        "DetachKeys": i.config.detach_keys,
        "Pid": 0,
    })))
}

/// `POST /exec/{id}/resize?h=&w=`.
pub async fn resize(api: &Arc<Api>, r: &Req) -> Result<Reply, ApiError> {
    let id = r.param("id");
    let (h, w) = streams::size(r)?;
    let i = api.execs.get(id)?;
    if let Some(tx) = &i.input {
        let _ = tx.send(Input::Resize(h, w));
    }
    Ok(http::empty(StatusCode::OK))
}
