//! A worker record of realistic size, for the benchmarks that write the store directly
//! (`benches/store.rs`, and `examples/workers_load.rs` for its commits alone). Shared by `#[path]`.

use std::sync::Arc;

use agentry::resolve::{Effective, Mode, Tools};
use agentry::workers::model::{SpawnSpec, WorkerId, WorkerRecord, generate_token, hash_token};

/// A worker record of realistic size: a few hundred bytes of prompt and effective agent.
pub fn record(i: usize) -> WorkerRecord {
    WorkerRecord::new(
        WorkerId::generate(),
        Arc::new(SpawnSpec {
            agent: "explore".to_owned(),
            description: format!("bench worker {i}"),
            prompt: "Find where the configuration is loaded, list every key it reads and say \
                     which ones have no default. Report file paths and line numbers. "
                .repeat(2),
            workspace: Some("/work/project".to_owned()),
            parent_id: None,
            depth: 1,
            create_time_ms: 1_700_000_000_000 + i as i64,
            caller_scope: "anonymous".to_owned(),
            request_id: Some(format!("req-{i}")),
            continues: None,
            context_id: None,
            a2a_message: None,
            effective: Effective {
                name: "explore".to_owned(),
                system_prompt: "You are a careful code explorer. Read before you answer."
                    .to_owned(),
                tools: Tools::AllExcept(vec!["task".into(), "write".into(), "edit".into()]),
                tool_rules: Vec::new(),
                spawns: agentry::persona::Spawns::none(),
                model: vec!["small".to_owned()],
                thinking_level: None,
                max_turns: Some(20),
                permission_mode: None,
                output_schema: None,
                output_schema_source: None,
                mode: Mode::Default,
                depth: 1,
                at_max_depth: false,
                memory_dir: None,
                mcp_servers: None,
                interactive: false,
                remote: None,
            },
        }),
        Some(hash_token(&generate_token())),
    )
}
