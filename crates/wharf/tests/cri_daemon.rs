//! `wharf daemon` over its real socket with a real gRPC client (tonic): version, status and
//! runtime config, the image service against the loopback fixture registry, error codes,
//! a second daemon on the same socket, and a clean stop on SIGTERM.

mod engine_support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tonic::Code;
use tonic::transport::Channel;
use wharf_cri::api::image_service_client::ImageServiceClient;
use wharf_cri::api::runtime_service_client::RuntimeServiceClient;
use wharf_cri::api::*;
use wharf_testbed::{Env, wait_until};

/// A daemon of the test's own (state, run directory, socket, cgroup parent).
struct Daemon {
    env: Env,
    socket: PathBuf,
    child: Child,
}

impl Daemon {
    fn start(name: &str) -> Daemon {
        let env = Env::new(name);
        let socket = env.path().join("wharf.sock");
        let child = daemon_command(&env, &socket)
            .stderr(Stdio::piped())
            .spawn()
            .expect("start wharf daemon");
        let d = Daemon { env, socket, child };
        assert!(
            wait_until(Duration::from_secs(20), || {
                std::os::unix::net::UnixStream::connect(&d.socket).is_ok()
            }),
            "the daemon never listened on {}",
            d.socket.display()
        );
        d
    }

    fn wharf(&self, args: &[&str]) -> std::process::Output {
        Command::new(env!("CARGO_BIN_EXE_wharf"))
            .args(args)
            .env("WHARF_ROOT", self.env.path().join("root"))
            .env("WHARF_RUN", self.env.path().join("run"))
            .env("WHARF_CGROUP_PARENT", &self.env.cgroup_parent)
            .env("WHARF_CONFIG", self.env.path().join("no-config.json"))
            .output()
            .unwrap()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn daemon_command(env: &Env, socket: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_wharf"));
    c.args(["daemon", "--listen"])
        .arg(socket)
        .env("WHARF_ROOT", env.path().join("root"))
        .env("WHARF_RUN", env.path().join("run"))
        .env("WHARF_CGROUP_PARENT", &env.cgroup_parent)
        .env("WHARF_CONFIG", env.path().join("no-config.json"))
        .env("DOCKER_CONFIG", env.path().join("no-docker-config"))
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    c
}

/// A channel to the daemon's unix socket.
async fn connect(socket: &Path) -> Channel {
    let socket = socket.to_path_buf();
    tonic::transport::Endpoint::from_static("http://wharf.invalid")
        .connect_with_connector(tower::service_fn(move |_| {
            let socket = socket.clone();
            async move {
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(
                    tokio::net::UnixStream::connect(socket).await?,
                ))
            }
        }))
        .await
        .expect("connect to the daemon")
}

fn image(name: &str) -> Option<ImageSpec> {
    Some(ImageSpec {
        image: name.to_string(),
        ..Default::default()
    })
}

#[tokio::test(flavor = "current_thread")]
async fn the_daemon_serves_version_status_and_images_over_its_socket() {
    let mut d = Daemon::start("cri-daemon");
    let channel = connect(&d.socket).await;
    let mut rt = RuntimeServiceClient::new(channel.clone());
    let mut img = ImageServiceClient::new(channel);

    let v = rt
        .version(VersionRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (v.runtime_name.as_str(), v.runtime_api_version.as_str()),
        ("wharf", "v1")
    );
    assert!(!v.runtime_version.is_empty());
    let st = rt
        .status(StatusRequest { verbose: true })
        .await
        .unwrap()
        .into_inner();
    let conds = st.status.unwrap().conditions;
    let cond = |t: &str| conds.iter().find(|c| c.r#type == t).cloned().unwrap();
    assert!(cond("RuntimeReady").status);
    // No pod can be served yet, and kubelet is told why.
    let net = cond("NetworkReady");
    assert!(!net.status && !net.reason.is_empty() && !net.message.is_empty());
    assert!(st.info.contains_key("config"));
    let cfg = rt
        .runtime_config(RuntimeConfigRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        cfg.linux.unwrap().cgroup_driver,
        CgroupDriver::Cgroupfs as i32
    );
    // A method whose step has not landed says so, naming itself.
    let e = rt
        .list_pod_sandbox(ListPodSandboxRequest::default())
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unimplemented);
    assert!(e.message().contains("ListPodSandbox"), "{e:?}");

    // Images.
    let busybox = engine_support::busybox();
    let absent = img
        .image_status(ImageStatusRequest {
            image: image(&busybox),
            verbose: false,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(absent.image.is_none(), "not there yet: not an error");
    let pulled = img
        .pull_image(PullImageRequest {
            image: image(&busybox),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(pulled.image_ref.starts_with("sha256:"), "{pulled:?}");
    let list = img
        .list_images(ListImagesRequest::default())
        .await
        .unwrap()
        .into_inner()
        .images;
    assert_eq!(list.len(), 1, "{list:?}");
    assert_eq!(list[0].id, pulled.image_ref);
    assert_eq!(list[0].repo_tags, vec![busybox.clone()]);
    assert!(list[0].repo_digests[0].contains("@sha256:"), "{list:?}");
    assert!(list[0].size > 0);
    let status = img
        .image_status(ImageStatusRequest {
            image: image(&pulled.image_ref),
            verbose: true,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(status.image.unwrap().id, pulled.image_ref);
    assert!(status.info["info"].contains("manifestDigest"));
    // The CLI works on the same state at the same time.
    let out = d.wharf(&["images"]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("fixtures/busybox"),
        "{out:?}"
    );
    let fs = img
        .image_fs_info(ImageFsInfoRequest::default())
        .await
        .unwrap()
        .into_inner();
    let used = fs.image_filesystems[0].used_bytes.unwrap().value;
    assert!(used > 1 << 20, "busybox takes more than 1 MiB: {used}");

    // Errors carry kubelet's codes.
    let e = img
        .pull_image(PullImageRequest {
            image: image("Not A Reference"),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    let e = img
        .pull_image(PullImageRequest {
            image: image(&format!(
                "{}/fixtures/no-such-image:1",
                engine_support::registry()
            )),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
    assert!(e.message().contains("no-such-image"), "{e:?}");
    let e = img
        .pull_image(PullImageRequest::default())
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");

    // Removing, twice (the second finds nothing, which is fine).
    for _ in 0..2 {
        img.remove_image(RemoveImageRequest {
            image: image(&pulled.image_ref),
        })
        .await
        .unwrap();
    }
    let list = img
        .list_images(ListImagesRequest::default())
        .await
        .unwrap()
        .into_inner()
        .images;
    assert!(list.is_empty(), "{list:?}");

    // A second daemon on the same socket is refused; the first goes on.
    let out = daemon_command(&d.env, &d.socket).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("in use"), "{err}");
    rt.version(VersionRequest::default()).await.unwrap();

    // SIGTERM: a clean stop, the socket gone, what it logged in logfmt. With no client
    // connected, it does not wait out its grace period.
    drop((rt, img));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let t = std::time::Instant::now();
    // SAFETY: kill(2) of the daemon this test started.
    unsafe { libc::kill(d.child.id() as i32, libc::SIGTERM) };
    let status = d.child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    assert!(!d.socket.exists());
    let mut log = String::new();
    std::io::Read::read_to_string(d.child.stderr.as_mut().unwrap(), &mut log).unwrap();
    assert!(log.contains("level=info msg=\"serving the CRI\""), "{log}");
    assert!(log.contains("signal=SIGTERM"), "{log}");
}
