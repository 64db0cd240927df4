//! Compiles the vendored CRI proto (proto/runtime/v1/api.proto) to Rust: protox parses it
//! (no protoc binary needed), tonic-build generates the messages and the service traits,
//! and the client, which the tests use.

fn main() {
    let proto = "proto/runtime/v1/api.proto";
    println!("cargo:rerun-if-changed={proto}");
    let fds = protox::compile([proto], ["proto"]).expect("compile the CRI proto");
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_fds(fds)
        .expect("generate the CRI code");
}
