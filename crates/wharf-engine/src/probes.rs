//! The checks of kubelet's probes that a pod's shim cannot make on a bare socket and has
//! `wharf kube-probe` make: an HTTPS GET (the gRPC health check is the CRI server's). It
//! is made with the HTTP client and TLS stack the engine pulls images with, so a front end
//! brings none of its own.

pub use wharf_image::https_probe::probe_https;
