//! Compiles `proto/agentry/v1/*.proto` and the A2A gRPC binding `proto/lf/a2a/v1/a2a.proto` with
//! protox (pure Rust, no system `protoc`) and writes the encoded descriptor set that server
//! reflection serves (and the A2A binding reads its messages' JSON through).

use std::{env, path::PathBuf};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = [
        "proto/agentry/v1/agentry.proto",
        "proto/lf/a2a/v1/a2a.proto",
    ];
    for p in &protos {
        println!("cargo:rerun-if-changed={p}");
    }
    let fds = protox::compile(protos, ["proto"])?;
    let out = PathBuf::from(env::var("OUT_DIR")?);
    std::fs::write(
        out.join("agentry_descriptor.bin"),
        prost::Message::encode_to_vec(&fds),
    )?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        // No `Client::connect(addr)` constructor: it would collide with RunnerService/Connect;
        // clients are built with `new(channel)`.
        .build_transport(false)
        // Written by hand, so the service can send an answer it encoded once (src/grpc/reply.rs).
        .extern_path(
            ".agentry.v1.ResolveAgentResponse",
            "crate::grpc::reply::ResolveAgentResponse",
        )
        .compile_fds(fds)?;
    Ok(())
}
