//! `ListCommands` and `ResolveCommand` (docs §3.6): translation only. Requests are validated
//! into domain values, the snapshot and [`crate::resolve::command`] do the work, and the result
//! is converted back.

use tonic::{Code, Status};

use super::{
    convert, metadata,
    page::{self, PageToken},
    pb,
    registry::check_workspace,
    status::{Violations, invalid, with_info},
};
use crate::{
    discovery::{CommandDef, Registry},
    persona::MAX_NAME_BYTES,
    resolve::command::{self, CommandError},
};

impl From<CommandError> for Status {
    fn from(e: CommandError) -> Self {
        let msg = e.to_string();
        match &e {
            CommandError::NotFound { name, .. } => with_info(
                Code::NotFound,
                "COMMAND_NOT_FOUND",
                msg,
                &[("command", name)],
            ),
            CommandError::TooLarge { .. } => invalid("arguments", msg),
        }
    }
}

/// A command as the API shows it.
pub fn command(c: &CommandDef) -> pb::Command {
    let cmd = &c.command;
    pb::Command {
        name: c.name.clone(),
        aliases: c.aliases.clone(),
        description: cmd.description.clone(),
        template: cmd.template.clone(),
        argument_hint: cmd.argument_hint.clone(),
        model: cmd.model.clone(),
        allowed_tools: cmd.allowed_tools.as_ref().map(|values| pb::StringList {
            values: values.clone(),
        }),
        extra_json: serde_json::Value::Object(cmd.extra.clone()).to_string(),
        source: convert::source(c.source),
        family: c.family.clone(),
        file_path: c.file_path.clone(),
        shadowed_by: c.shadowed_by.clone().unwrap_or_default(),
        content_sha256: c.content_sha256.clone(),
        format: convert::format(cmd.format),
    }
}

/// ListCommands: one page of the winners; shadowed ones and diagnostics on the first page.
pub async fn list(
    registry: &Registry,
    req: tonic::Request<pb::ListCommandsRequest>,
) -> Result<pb::ListCommandsResponse, Status> {
    let mut v = Violations::default();
    // Lineage does not shape commands, but malformed metadata is refused on every RPC.
    metadata::declared(req.metadata(), &mut v);
    let r = req.into_inner();
    check_workspace(&r.workspace, &mut v);
    let page_size = page::page_size(r.page_size, &mut v);
    let query = page::query_hash(&[
        "commands",
        &r.workspace,
        if r.include_shadowed { "1" } else { "0" },
    ]);
    let token = page::page_token(&r.page_token, &query, &mut v);
    v.check()?;

    let snap = registry.snapshot(&r.workspace).await?;
    if let Some(t) = &token
        && t.at != snap.version
    {
        return Err(with_info(
            Code::Aborted,
            "REGISTRY_CHANGED",
            format!(
                "the registry changed during pagination (version {} → {}); restart the listing without a page_token",
                t.at, snap.version
            ),
            &[("registry_version", &snap.version)],
        ));
    }
    let all = &snap.commands;
    let offset = token.map_or(0, |t| t.offset).min(all.len());
    let end = (offset + page_size).min(all.len());
    let first = offset == 0;
    let next_page_token = if end < all.len() {
        PageToken {
            offset: end,
            at: snap.version.clone(),
            query,
        }
        .encode()
    } else {
        String::new()
    };
    Ok(pb::ListCommandsResponse {
        commands: all[offset..end].iter().map(|c| command(c)).collect(),
        shadowed: if first && r.include_shadowed {
            snap.shadowed_commands.iter().map(|c| command(c)).collect()
        } else {
            Vec::new()
        },
        diagnostics: if first {
            snap.command_diagnostics
                .iter()
                .map(convert::diagnostic)
                .collect()
        } else {
            Vec::new()
        },
        registry_version: snap.version.clone(),
        next_page_token,
        total_size: i32::try_from(all.len()).unwrap_or(i32::MAX),
    })
}

/// ResolveCommand: the command and its template expanded with the arguments.
pub async fn resolve(
    registry: &Registry,
    max_prompt_bytes: usize,
    req: tonic::Request<pb::ResolveCommandRequest>,
) -> Result<pb::ResolveCommandResponse, Status> {
    let mut v = Violations::default();
    metadata::declared(req.metadata(), &mut v);
    let r = req.into_inner();
    if r.name.is_empty() {
        v.add("name", "must not be empty");
    } else if r.name.len() > MAX_NAME_BYTES {
        v.add(
            "name",
            format!("is {} bytes; the limit is {MAX_NAME_BYTES}", r.name.len()),
        );
    } else if r.name.chars().any(char::is_control) {
        v.add("name", "must not contain control characters");
    }
    check_workspace(&r.workspace, &mut v);
    if r.arguments.len() > max_prompt_bytes {
        v.add(
            "arguments",
            format!(
                "is {} bytes; the limit (limits.max_prompt_bytes) is {max_prompt_bytes}",
                r.arguments.len()
            ),
        );
    }
    v.check()?;
    let snap = registry.snapshot(&r.workspace).await?;
    let (def, expanded) = command::resolve(&snap, &r.name, &r.arguments, max_prompt_bytes)?;
    Ok(pb::ResolveCommandResponse {
        command: Some(command(def)),
        expanded,
        registry_version: snap.version.clone(),
    })
}
