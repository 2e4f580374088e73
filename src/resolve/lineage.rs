//! Who is calling (docs/lineage.md §5.1): what the service knows about a calling worker from
//! its own records, before the caller's declared metadata narrows it.
//!
//! Pure and typed: the known lineage of a worker is computed once, from the [`Effective`] agent
//! it was spawned with, never re-read from untyped JSON.

use super::{Caller, Effective};

/// The lineage a worker of `agent` that got `eff` has when it calls back with its token: its own
/// depth, its own spawn policy, its own agent blocked (self-recursion guard), and its effective
/// output schema as the last precedence level for its children's.
pub fn of_worker(agent: &str, eff: &Effective) -> Caller {
    Caller {
        depth: eff.depth,
        policy: eff.spawns.clone(),
        blocked: vec![agent.to_owned()],
        parent_output_schema: eff.output_schema.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::persona::Spawns;
    use crate::resolve::{Mode, Tools};

    fn effective(spawns: &str, depth: u32) -> Effective {
        Effective {
            name: "plan".into(),
            system_prompt: String::new(),
            tools: Tools::AllExcept(Vec::new()),
            tool_rules: Vec::new(),
            spawns: Spawns::parse_policy(spawns),
            model: Vec::new(),
            thinking_level: None,
            max_turns: None,
            permission_mode: None,
            output_schema: Some(serde_json::json!({"type": "object"})),
            output_schema_source: None,
            mode: Mode::Default,
            depth,
            at_max_depth: false,
            memory_dir: None,
            mcp_servers: None,
            interactive: false,
            remote: None,
        }
    }

    #[test]
    fn a_worker_calls_with_its_own_depth_policy_and_agent_blocked() {
        let c = of_worker("plan", &effective("explore", 1));
        assert_eq!(c.depth, 1);
        assert_eq!(c.policy, Spawns::Only(vec!["explore".into()]));
        assert_eq!(c.blocked, ["plan"]);
        assert_eq!(
            c.parent_output_schema,
            Some(serde_json::json!({"type": "object"}))
        );
        assert_eq!(of_worker("task", &effective("*", 1)).policy, Spawns::Any);
        assert_eq!(
            of_worker("quick_task", &effective("", 2)).policy,
            Spawns::Only(Vec::new())
        );
    }
}
