//! CPU time and memory of processes, from `/proc` (the node agent runs pods as host
//! processes, so an executor's or the operator's usage is that of its process).

use std::path::Path;

/// CPU seconds (user + system) a process has used so far; 0 when it is gone.
pub fn cpu_seconds(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // Fields after the command name, which is in parentheses and may hold spaces.
    let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
        return 0.0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line: 12th and 13th after ')'.
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    (ticks(11) + ticks(12)) as f64 / clock_ticks()
}

fn clock_ticks() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// `VmRSS` and `VmHWM` (peak) of a process in MiB; zeros when it is gone.
pub fn memory_mib(pid: u32) -> (f64, f64) {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return (0.0, 0.0);
    };
    let kib = |key: &str| {
        status
            .lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (kib("VmRSS:") / 1024.0, kib("VmHWM:") / 1024.0)
}

/// Processes whose command line mentions `dir` (the cluster's components all take flags
/// under the cluster's directory), with their executable's file name.
pub fn processes_under(dir: &Path) -> Vec<(String, u32)> {
    let needle = dir.display().to_string();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let text = String::from_utf8_lossy(&cmd);
            if !text.contains(&needle) {
                return None;
            }
            let exe = text.split('\0').next()?;
            let name = Path::new(exe).file_name()?.to_string_lossy().into_owned();
            Some((name, pid))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        let me = std::process::id();
        let (rss, hwm) = memory_mib(me);
        assert!(rss > 0.0 && hwm >= rss, "rss {rss} hwm {hwm}");
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = x.wrapping_add(i * i);
        }
        std::hint::black_box(x);
        assert!(cpu_seconds(me) > 0.0);
        assert_eq!(memory_mib(u32::MAX), (0.0, 0.0));
    }
}
