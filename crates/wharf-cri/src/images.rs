//! The CRI ImageService over the engine's images: list, status, pull (with the request's
//! credentials), remove, and the image filesystem's usage.

use std::collections::HashMap;

use tonic::{Request, Response, Status};
use wharf_engine::images::{Credentials, Image, Images as EngineImages, PullOptions};

use crate::api::image_service_server::ImageService;
use crate::api::*;
use crate::engines::Engines;
use crate::status::from_engine;

/// The ImageService.
pub struct Images {
    engines: Engines,
}

impl Images {
    /// Serve the engines' images.
    pub fn new(engines: Engines) -> Images {
        Images { engines }
    }

    /// Run `f` on the engine's images, counted in the metrics as `method`.
    async fn with_images<T: Send + 'static>(
        &self,
        method: &'static str,
        f: impl FnOnce(&EngineImages<'_>) -> Result<T, Status> + Send + 'static,
    ) -> Result<T, Status> {
        let t = std::time::Instant::now();
        let r = self.engines.call(move |e| f(&e.images())).await;
        let code = r.as_ref().map_or_else(|s| s.code(), |_| tonic::Code::Ok);
        crate::metrics::request(method, code, t.elapsed());
        if method == "PullImage" {
            crate::metrics::pull(r.is_ok());
        }
        r
    }
}

/// The reference a request names (an error when it names none).
fn reference(spec: Option<&ImageSpec>) -> Result<String, Status> {
    match spec.map(|s| s.image.trim()) {
        Some(r) if !r.is_empty() => Ok(r.to_string()),
        _ => Err(Status::invalid_argument(
            "no image given (ImageSpec.image is empty)",
        )),
    }
}

/// An image as the CRI shows it: tags and digests from its names, the user it runs as.
fn cri_image(image: &Image, size: u64) -> crate::api::Image {
    let mut repo_tags = Vec::new();
    let mut repo_digests = Vec::new();
    for n in &image.names {
        if n.contains('@') {
            repo_digests.push(n.clone());
        } else {
            repo_tags.push(n.clone());
            // The manifest's digest under each repository, as containerd lists it.
            let repo = n.rsplit_once(':').map_or(n.as_str(), |(r, _)| r);
            let d = format!("{repo}@{}", image.manifest_digest.as_str());
            if !repo_digests.contains(&d) {
                repo_digests.push(d);
            }
        }
    }
    let user = image
        .config
        .config()
        .as_ref()
        .and_then(|c| c.user().clone())
        .unwrap_or_default();
    let user = user.split(':').next().unwrap_or("").to_string();
    let (uid, username) = match user.parse::<i64>() {
        Ok(n) => (Some(Int64Value { value: n }), String::new()),
        Err(_) if user.is_empty() => (Some(Int64Value { value: 0 }), String::new()),
        Err(_) => (None, user),
    };
    crate::api::Image {
        id: image.id.as_str().to_string(),
        repo_tags,
        repo_digests,
        size,
        uid,
        username,
        spec: Some(ImageSpec {
            image: image.id.as_str().to_string(),
            ..Default::default()
        }),
        pinned: false,
    }
}

/// Credentials of a CRI AuthConfig: username and password, or docker's base64 `auth`.
fn credentials(auth: Option<&AuthConfig>) -> Result<Option<Credentials>, Status> {
    let Some(a) = auth else { return Ok(None) };
    if !a.username.is_empty() {
        return Ok(Some(Credentials {
            username: a.username.clone(),
            password: a.password.clone(),
        }));
    }
    if !a.auth.is_empty() {
        use base64::Engine as _;
        let raw = base64::engine::general_purpose::STANDARD
            .decode(a.auth.trim())
            .map_err(|e| Status::invalid_argument(format!("AuthConfig.auth is not base64: {e}")))?;
        let text = String::from_utf8_lossy(&raw);
        let Some((u, p)) = text.split_once(':') else {
            return Err(Status::invalid_argument(
                "AuthConfig.auth is not base64 of user:password",
            ));
        };
        return Ok(Some(Credentials {
            username: u.to_string(),
            password: p.to_string(),
        }));
    }
    if !a.identity_token.is_empty() || !a.registry_token.is_empty() {
        return Err(Status::unimplemented(
            "identity and registry tokens in AuthConfig are not supported yet: give a username \
             and password",
        ));
    }
    Ok(None)
}

/// Bytes and inodes used below `dir` ([`wharf_sys::fs::disk_usage`]).
pub(crate) use wharf_sys::fs::disk_usage as usage;

type ImagesStream = std::pin::Pin<
    Box<dyn tokio_stream::Stream<Item = Result<StreamImagesResponse, Status>> + Send>,
>;

#[tonic::async_trait]
impl ImageService for Images {
    async fn list_images(
        &self,
        request: Request<ListImagesRequest>,
    ) -> Result<Response<ListImagesResponse>, Status> {
        let filter = request
            .into_inner()
            .filter
            .and_then(|f| f.image)
            .map(|s| s.image)
            .filter(|s| !s.is_empty());
        let images = self
            .with_images("ListImages", move |images| {
                let mut ids: Vec<String> = Vec::new();
                for s in images.list().map_err(from_engine)? {
                    if !ids.contains(&s.id) {
                        ids.push(s.id);
                    }
                }
                let mut out = Vec::new();
                for id in ids {
                    let image = images.resolve(&id).map_err(from_engine)?;
                    if let Some(f) = &filter {
                        let matches = images.resolve(f).is_ok_and(|i| i.id == image.id);
                        if !matches {
                            continue;
                        }
                    }
                    out.push(cri_image(&image, image.size));
                }
                Ok(out)
            })
            .await?;
        Ok(Response::new(ListImagesResponse { images }))
    }

    type StreamImagesStream = ImagesStream;

    async fn stream_images(
        &self,
        _request: Request<StreamImagesRequest>,
    ) -> Result<Response<Self::StreamImagesStream>, Status> {
        Err(Status::unimplemented("StreamImages is not implemented yet"))
    }

    async fn image_status(
        &self,
        request: Request<ImageStatusRequest>,
    ) -> Result<Response<ImageStatusResponse>, Status> {
        let req = request.into_inner();
        let name = reference(req.image.as_ref())?;
        let verbose = req.verbose;
        let resp = self
            .with_images("ImageStatus", move |images| match images.resolve(&name) {
                Ok(image) => {
                    let mut info = HashMap::new();
                    if verbose {
                        let v = serde_json::json!({
                            "id": image.id.as_str(),
                            "names": image.names,
                            "manifestDigest": image.manifest_digest.as_str(),
                            "imageSpec": image.config,
                        });
                        info.insert("info".to_string(), v.to_string());
                    }
                    Ok(ImageStatusResponse {
                        image: Some(cri_image(&image, image.size)),
                        info,
                    })
                }
                // Not an error in the CRI: the image is simply not there.
                Err(e) if e.is_image_not_found() => Ok(ImageStatusResponse::default()),
                Err(e) => Err(from_engine(e)),
            })
            .await?;
        Ok(Response::new(resp))
    }

    async fn pull_image(
        &self,
        request: Request<PullImageRequest>,
    ) -> Result<Response<PullImageResponse>, Status> {
        let req = request.into_inner();
        let name = reference(req.image.as_ref())?;
        let creds = credentials(req.auth.as_ref())?;
        crate::log::log(
            crate::log::Level::Info,
            "pulling image",
            &[("image", &name)],
        );
        let image_ref = self
            .with_images("PullImage", move |images| {
                let opts = PullOptions {
                    creds,
                    ..Default::default()
                };
                let image = images.pull(&name, &opts, &()).map_err(from_engine)?;
                Ok(image.id.as_str().to_string())
            })
            .await?;
        Ok(Response::new(PullImageResponse { image_ref }))
    }

    async fn remove_image(
        &self,
        request: Request<RemoveImageRequest>,
    ) -> Result<Response<RemoveImageResponse>, Status> {
        let name = reference(request.into_inner().image.as_ref())?;
        self.with_images("RemoveImage", move |images| {
            // All of the image goes (kubelet removes by id); a missing image is fine.
            let id = match images.resolve(&name) {
                Ok(image) => image.id.as_str().to_string(),
                Err(e) if e.is_image_not_found() => return Ok(()),
                Err(e) => return Err(from_engine(e)),
            };
            // A concurrent removal may take it first: gone either way.
            match images.remove(&id, true) {
                Ok(_) => Ok(()),
                Err(e) if e.is_image_not_found() => Ok(()),
                Err(e) => Err(from_engine(e)),
            }
        })
        .await?;
        Ok(Response::new(RemoveImageResponse {}))
    }

    async fn image_fs_info(
        &self,
        _request: Request<ImageFsInfoRequest>,
    ) -> Result<Response<ImageFsInfoResponse>, Status> {
        let fs = self
            .with_images("ImageFsInfo", |images| {
                let used = images.filesystem_usage();
                Ok(FilesystemUsage {
                    timestamp: crate::meta::now_nanos(),
                    fs_id: Some(FilesystemIdentifier {
                        mountpoint: used.mountpoint.display().to_string(),
                    }),
                    used_bytes: Some(UInt64Value { value: used.bytes }),
                    inodes_used: Some(UInt64Value { value: used.inodes }),
                })
            })
            .await?;
        Ok(Response::new(ImageFsInfoResponse {
            image_filesystems: vec![fs.clone()],
            container_filesystems: vec![fs],
        }))
    }
}
