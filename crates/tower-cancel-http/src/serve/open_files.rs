//! The process's limit on open files, where the system says it without a system call of our own (the crate has
//! no unsafe code): Linux's `/proc/self/limits`.

/// The soft `RLIMIT_NOFILE`, or `None` where it cannot be read (another system, no procfs) or is unlimited.
pub(super) fn soft_limit() -> Option<usize> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    parse(&limits)
}

/// The soft limit of the `Max open files` line: `Max open files   1024   524288   files`.
fn parse(limits: &str) -> Option<usize> {
    let line = limits
        .lines()
        .find_map(|line| line.strip_prefix("Max open files"))?;
    line.split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn reads_the_soft_limit() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max processes             63459                63459                processes \n\
                      Max open files            1024                 524288               files     \n";
        assert_eq!(parse(limits), Some(1024));
        assert_eq!(parse("Max open files  unlimited  unlimited  files\n"), None);
        assert_eq!(parse(""), None);
    }
}
