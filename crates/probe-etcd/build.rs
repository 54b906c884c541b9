//! Keeps `protoc-bin-vendored` in the build graph.
//!
//! etcd-client's build script compiles etcd's `.proto` files with prost-build, which runs the
//! program named by `PROTOC`. `.cargo/config.toml` sets that to `scripts/protoc`, which runs the
//! `protoc` binary shipped inside the `protoc-bin-vendored` crate. Cargo downloads only what a
//! build needs, so that crate must be a dependency of something being built: this build script
//! is that something. It also checks that the crate has a binary for the host, and says so
//! early when it has none (a system `protoc` can then be named by `PROTOC`).

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    if let Err(e) = protoc_bin_vendored::protoc_bin_path() {
        println!("cargo::warning={e}; set PROTOC to a protoc binary to build etcd-client");
    }
}
