//! Redis backend: shared state for executor pools. One hash per agent
//! (`ari:{AGENT}:kv`) plus a byte counter (`ari:{AGENT}:used`); the braces are
//! a hash tag so both keys land in one slot. `apply` is one Lua script, which
//! Redis runs atomically, quota check included.

use std::time::Duration;

use super::backend::{Batch, StorageBackend, StorageError};

const TIMEOUT: Duration = Duration::from_secs(5);

/// KEYS: kv hash, used counter, receipts hash, receipt-times sorted set. ARGV: max (-1 = none),
/// number of writes, number of reads, receipt id ("" = none), receipt, now (unix seconds),
/// receipt cutoff (expired below), receipt max count, then field/present ("1"/"0")/value triples
/// the task read, then field/value pairs, then fields to delete. Returns {1, new_used};
/// {0, would_use} over the quota; {2, i} if read `i` changed; {3, 0} if the receipt exists.
const APPLY_SCRIPT: &str = r#"
local nw = tonumber(ARGV[2])
local nr = tonumber(ARGV[3])
for i = 0, nr - 1 do
  local cur = redis.call('HGET', KEYS[1], ARGV[9 + 3 * i])
  if ARGV[10 + 3 * i] == '1' then
    if cur ~= ARGV[11 + 3 * i] then return {2, i} end
  elseif cur then
    return {2, i}
  end
end
if ARGV[4] ~= '' and redis.call('HEXISTS', KEYS[3], ARGV[4]) == 1 then
  return {3, 0}
end
local w = 9 + 3 * nr
local used = tonumber(redis.call('GET', KEYS[2]) or '0')
local new = used
local function size(f)
  if redis.call('HEXISTS', KEYS[1], f) == 1 then
    return #f + redis.call('HSTRLEN', KEYS[1], f)
  end
  return 0
end
for i = 0, nw - 1 do
  local f = ARGV[w + 2 * i]
  new = new - size(f) + #f + #ARGV[w + 1 + 2 * i]
end
for i = w + 2 * nw, #ARGV do
  new = new - size(ARGV[i])
end
local max = tonumber(ARGV[1])
if max >= 0 and new > max and new > used then
  return {0, new}
end
for i = 0, nw - 1 do
  redis.call('HSET', KEYS[1], ARGV[w + 2 * i], ARGV[w + 1 + 2 * i])
end
for i = w + 2 * nw, #ARGV do
  redis.call('HDEL', KEYS[1], ARGV[i])
end
redis.call('SET', KEYS[2], new)
if ARGV[4] ~= '' then
  local expired = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', '(' .. ARGV[7])
  for _, id in ipairs(expired) do redis.call('HDEL', KEYS[3], id) end
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', '(' .. ARGV[7])
  local over = redis.call('ZCARD', KEYS[4]) - tonumber(ARGV[8]) + 1
  if over > 0 then
    local oldest = redis.call('ZPOPMIN', KEYS[4], over)
    for i = 1, #oldest, 2 do redis.call('HDEL', KEYS[3], oldest[i]) end
  end
  redis.call('HSET', KEYS[3], ARGV[4], ARGV[5])
  redis.call('ZADD', KEYS[4], ARGV[6], ARGV[4])
end
return {1, new}
"#;

fn be(e: impl std::fmt::Display) -> StorageError {
    StorageError::Backend(format!("redis: {e}"))
}

/// One agent's namespace in Redis, over a lazily (re)opened sync connection.
pub struct RedisBackend {
    client: redis::Client,
    conn: Option<redis::Connection>,
    agent: String,
    kv_key: String,
    used_key: String,
    receipts_key: String,
    receipt_times_key: String,
}

impl std::fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBackend")
            .field("agent", &self.agent)
            .finish_non_exhaustive()
    }
}

impl Clone for RedisBackend {
    fn clone(&self) -> Self {
        self.for_agent(&self.agent)
    }
}

impl RedisBackend {
    /// `url` like `redis://127.0.0.1:6379/`; connects now so a bad URL fails fast.
    pub fn connect(url: &str, agent: &str) -> Result<Self, StorageError> {
        let client = redis::Client::open(url).map_err(be)?;
        let mut this = Self::with_client(client, agent);
        this.conn()?;
        Ok(this)
    }

    fn with_client(client: redis::Client, agent: &str) -> Self {
        Self {
            client,
            conn: None,
            agent: agent.to_owned(),
            kv_key: format!("ari:{{{agent}}}:kv"),
            used_key: format!("ari:{{{agent}}}:used"),
            receipts_key: format!("ari:{{{agent}}}:receipts"),
            receipt_times_key: format!("ari:{{{agent}}}:receipt-times"),
        }
    }

    /// Another agent's namespace on the same server (connects on first use).
    pub fn for_agent(&self, agent: &str) -> Self {
        Self::with_client(self.client.clone(), agent)
    }

    fn conn(&mut self) -> Result<&mut redis::Connection, StorageError> {
        if self.conn.is_none() {
            let conn = self
                .client
                .get_connection_with_timeout(TIMEOUT)
                .map_err(be)?;
            conn.set_read_timeout(Some(TIMEOUT)).map_err(be)?;
            conn.set_write_timeout(Some(TIMEOUT)).map_err(be)?;
            self.conn = Some(conn);
        }
        self.conn.as_mut().ok_or_else(|| be("no connection"))
    }

    /// Runs `cmd`, dropping the connection on error so the next call reconnects.
    fn query<T: redis::FromRedisValue>(&mut self, cmd: &redis::Cmd) -> Result<T, StorageError> {
        let result = cmd.query(self.conn()?);
        if result.is_err() {
            self.conn = None;
        }
        result.map_err(be)
    }
}

impl StorageBackend for RedisBackend {
    fn get(&mut self, key: &str) -> Result<Option<Vec<u8>>, StorageError> {
        let mut cmd = redis::cmd("HGET");
        cmd.arg(&self.kv_key).arg(key);
        self.query(&cmd)
    }

    fn apply(&mut self, batch: &Batch) -> Result<(), StorageError> {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(APPLY_SCRIPT)
            .arg(4)
            .arg(&self.kv_key)
            .arg(&self.used_key)
            .arg(&self.receipts_key)
            .arg(&self.receipt_times_key)
            .arg(batch.max_bytes.map_or(-1i128, i128::from).to_string())
            .arg(batch.writes.len())
            .arg(batch.reads.len());
        match &batch.receipt {
            Some((id, bytes)) => cmd.arg(id).arg(bytes.as_slice()),
            None => cmd.arg("").arg(""),
        };
        cmd.arg(batch.now_unix_secs)
            .arg(batch.receipt_limits.cutoff(batch.now_unix_secs))
            .arg(batch.receipt_limits.max_count);
        for (k, v) in &batch.reads {
            match v {
                Some(v) => cmd.arg(k).arg("1").arg(v.as_slice()),
                None => cmd.arg(k).arg("0").arg(""),
            };
        }
        for (k, v) in &batch.writes {
            cmd.arg(k).arg(v.as_slice());
        }
        for k in &batch.deletes {
            cmd.arg(k);
        }
        let (ok, new_used): (i64, i64) = self.query(&cmd)?;
        if ok == 1 {
            Ok(())
        } else if ok == 2 {
            let key = usize::try_from(new_used)
                .ok()
                .and_then(|i| batch.reads.get(i))
                .map(|(k, _)| k.clone())
                .unwrap_or_default();
            Err(StorageError::Conflict { key })
        } else if ok == 3 {
            Err(StorageError::Conflict {
                key: batch
                    .receipt
                    .as_ref()
                    .map(|(id, _)| id.clone())
                    .unwrap_or_default(),
            })
        } else {
            Err(StorageError::QuotaExceeded {
                would_use: u64::try_from(new_used).unwrap_or(0),
                max_bytes: batch.max_bytes.unwrap_or(0),
            })
        }
    }

    fn used_bytes(&mut self) -> Result<u64, StorageError> {
        let mut cmd = redis::cmd("GET");
        cmd.arg(&self.used_key);
        let used: Option<u64> = self.query(&cmd)?;
        Ok(used.unwrap_or(0))
    }

    fn handle(&self) -> Box<dyn StorageBackend> {
        Box::new(self.clone())
    }

    fn receipt(&mut self, id: &str) -> Result<Option<Vec<u8>>, StorageError> {
        let mut cmd = redis::cmd("HGET");
        cmd.arg(&self.receipts_key).arg(id);
        self.query(&cmd)
    }

    fn drop_receipt(&mut self, id: &str) -> Result<(), StorageError> {
        let mut cmd = redis::cmd("HDEL");
        cmd.arg(&self.receipts_key).arg(id);
        self.query::<i64>(&cmd)?;
        let mut cmd = redis::cmd("ZREM");
        cmd.arg(&self.receipt_times_key).arg(id);
        self.query::<i64>(&cmd).map(|_| ())
    }

    fn receipt_count(&mut self) -> Result<u64, StorageError> {
        let mut cmd = redis::cmd("HLEN");
        cmd.arg(&self.receipts_key);
        self.query(&cmd)
    }
}
