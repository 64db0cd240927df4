//! kubelet's HTTPS probe (`httpGet` with `scheme: HTTPS`), for `wharf kube-probe https`:
//! one GET over TLS with the certificate not verified (as kubelet does: a pod's own
//! certificate is rarely one the node trusts), judged by its status (200-399 pass).
//! It lives here because this crate owns Wharf's HTTP client and TLS stack.

use std::time::Duration;

use ureq::Agent;
use ureq::tls::{TlsConfig, TlsProvider};

/// GET `https://host:port{path}` with `headers` within `timeout`; Err is kubelet's
/// wording of the failure.
pub fn probe_https(
    host: &str,
    port: u16,
    path: &str,
    headers: &[(String, String)],
    timeout: Duration,
) -> Result<(), String> {
    let tls = TlsConfig::builder()
        .provider(TlsProvider::Rustls)
        .disable_verification(true)
        .build();
    let agent: Agent = Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(10)
        .user_agent("kube-probe/wharf")
        .timeout_global(Some(timeout))
        .tls_config(tls)
        .build()
        .into();
    let authority = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    let url = format!("https://{authority}{path}");
    let mut req = agent.get(&url);
    for (k, v) in headers {
        req = req.header(k, v);
    }
    match req.call() {
        Ok(resp) => {
            let code = resp.status().as_u16();
            if (200..400).contains(&code) {
                Ok(())
            } else {
                Err(format!("HTTP probe failed with statuscode: {code}"))
            }
        }
        Err(e) => Err(format!("Get \"{url}\": {e}")),
    }
}
