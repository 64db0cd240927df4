//! kubelet's gRPC probe, for `wharf kube-probe grpc`: one call of the standard health
//! service (`grpc.health.v1.Health/Check`) over plaintext HTTP/2, passing on SERVING.
//! It lives here because this crate owns Wharf's gRPC stack.

use std::time::Duration;

/// grpc.health.v1.HealthCheckRequest.
#[derive(Clone, PartialEq, prost::Message)]
struct HealthCheckRequest {
    #[prost(string, tag = "1")]
    service: String,
}

/// grpc.health.v1.HealthCheckResponse.
#[derive(Clone, PartialEq, prost::Message)]
struct HealthCheckResponse {
    #[prost(int32, tag = "1")]
    status: i32,
}

/// The status names of grpc.health.v1.HealthCheckResponse.ServingStatus.
fn status_name(n: i32) -> &'static str {
    match n {
        1 => "SERVING",
        2 => "NOT_SERVING",
        3 => "SERVICE_UNKNOWN",
        _ => "UNKNOWN",
    }
}

/// Ask `host:port` about `service` ("" for the whole server) within `timeout`; Err is
/// kubelet's wording of the failure.
pub fn grpc_health_check(
    host: &str,
    port: u16,
    service: &str,
    timeout: Duration,
) -> Result<(), String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("a runtime for the check: {e}"))?;
    let authority = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    rt.block_on(async {
        let call = async {
            let channel = tonic::transport::Endpoint::from_shared(format!("http://{authority}"))
                .map_err(|e| e.to_string())?
                .connect_timeout(timeout)
                .timeout(timeout)
                .connect()
                .await
                .map_err(|e| {
                    format!(
                        "timeout: failed to connect service {authority:?} within {}s: {e}",
                        timeout.as_secs()
                    )
                })?;
            let mut client = tonic::client::Grpc::new(channel);
            client
                .ready()
                .await
                .map_err(|e| format!("service {authority:?}: {e}"))?;
            let codec =
                tonic_prost::ProstCodec::<HealthCheckRequest, HealthCheckResponse>::default();
            let path = tonic::codegen::http::uri::PathAndQuery::from_static(
                "/grpc.health.v1.Health/Check",
            );
            let req = tonic::Request::new(HealthCheckRequest {
                service: service.to_string(),
            });
            client
                .unary(req, path, codec)
                .await
                .map(|r| r.into_inner().status)
                .map_err(|s| format!("health rpc failed: {}: {}", s.code(), s.message()))
        };
        match tokio::time::timeout(timeout, call).await {
            Err(_) => Err(format!(
                "timeout: health rpc did not complete within {}s",
                timeout.as_secs_f64()
            )),
            Ok(Err(e)) => Err(e),
            Ok(Ok(1)) => Ok(()),
            Ok(Ok(n)) => Err(format!(
                "service unhealthy (responded with \"{}\")",
                status_name(n)
            )),
        }
    })
}
