//! The Kubernetes base's agentry config is one the real loader accepts, and runs workers on
//! runners (the distroless image ships no agent program for exec).

use agentry::config::{Config, ExecutorKind};

#[test]
fn the_k8s_config_loads_and_uses_runners() {
    let manifest = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/k8s/configmap-config.yaml"),
    )
    .unwrap();
    let doc: serde_yaml::Value = serde_yaml::from_str(&manifest).unwrap();
    let text = doc["data"]["config.yaml"]
        .as_str()
        .expect("data.config.yaml");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, text).unwrap();
    let cfg = Config::load(Some(&path), []).expect("the deployed config loads");
    assert_eq!(cfg.executor.kind, ExecutorKind::Runner);
    assert!(cfg.executor.by_agent.is_empty());
    assert!(cfg.shutdown_grace < std::time::Duration::from_secs(60));
}
