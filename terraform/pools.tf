# Worker pools (docs/pools.md): pools.json in your pipelines package, the file `make dev`
# reads (or var.pools_file). Each pool gets, by for_each over local.pools, its own topic
# (<prefix>-jobs-<pool>), push subscription (<prefix>-claim-<pool>, its own ack deadline,
# retry and dead-letter policy) and claim function (<prefix>-claim-<pool>, its own sizing,
# RECLAIM_POOL and stale time), merged into the maps the resources already iterate
# (functions.tf, pubsub.tf), so the default pool keeps today's resources at today's
# addresses: nothing to move. Pool claims run as claim's service account. The functions
# read the same file (RECLAIM_POOLS_FILE) and check it at start exactly (shared/pools.py);
# here a bad file fails the plan, naming the pool.
locals {
  pools_path = (var.pools_file == "" ? "${local.pipelines_dir}/pools.json"
  : startswith(var.pools_file, "/") ? var.pools_file : abspath("${path.root}/${var.pools_file}"))
  pools_found = fileexists(local.pools_path)
  # the archive path of the file the functions read ("" = no pools): the archives carry
  # the pipelines package, so the file must be in it (a problem below says so)
  pools_inside  = startswith(local.pools_path, "${local.pipelines_dir}/")
  pools_setting = local.pools_found ? "${local.pipelines_package}/${trimprefix(local.pools_path, "${local.pipelines_dir}/")}" : ""
  pools_doc     = local.pools_found ? jsondecode(file(local.pools_path)) : {}

  pools_declared = try(local.pools_doc.pools, {})
  # Every field but pipelines defaults to claim's own (claim_function, claim_push,
  # queue.stale_seconds): a pool that names only pipelines is today's claim, apart.
  pools = {
    for name, p in local.pools_declared : name => {
      pipelines             = try(p.pipelines, [])
      memory                = try(p.memory, var.claim_function.memory)
      cpu                   = try(p.cpu, var.claim_function.cpu)
      concurrency           = try(p.concurrency, var.claim_function.concurrency)
      timeout_seconds       = try(p.timeout_seconds, var.claim_function.timeout_seconds)
      min_instances         = try(p.min_instances, var.claim_function.min_instances)
      max_instances         = try(p.max_instances, var.claim_function.max_instances)
      stale_seconds         = try(p.stale_seconds, var.queue.stale_seconds)
      ack_deadline_seconds  = try(p.ack_deadline_seconds, var.claim_push.ack_deadline_seconds)
      max_delivery_attempts = try(p.max_delivery_attempts, var.claim_push.max_delivery_attempts)
      runner                = try(p.runner, "push")
      job                   = try(p.job, null)
    }
  }
  # The pools whose stages run on a Cloud Run job (terraform/run_jobs.tf makes the jobs).
  job_pools = { for name, p in local.pools : name => p if p.runner == "job" }

  # Each pool's claim function, topic and push subscription, keyed as the maps of the
  # default pool's are (functions.tf and pubsub.tf iterate the merged maps).
  pool_functions = {
    for name, p in local.pools : "claim_${name}" => {
      source          = "claim"
      entry_point     = "claim"
      concurrency     = p.concurrency
      cpu             = p.cpu
      memory          = p.memory
      timeout_seconds = p.timeout_seconds
      min_instances   = p.min_instances
      max_instances   = p.max_instances
    }
  }
  pool_topics = { for name, p in local.pools : "jobs_${name}" => "${var.name_prefix}-jobs-${name}" }
  pool_pushes = {
    for name, p in local.pools : "claim_${name}" => {
      subscription = "${var.name_prefix}-claim-${name}"
      topic        = "jobs_${name}"
      settings = merge(var.claim_push, {
        ack_deadline_seconds  = p.ack_deadline_seconds
        max_delivery_attempts = p.max_delivery_attempts
      })
    }
  }
  all_functions = merge(local.functions, local.pool_functions)
  all_topics    = merge(local.topics, local.pool_topics)
  all_pushes    = merge(local.pushes, local.pool_pushes)
  # The service account each function runs as: its own, claim's for a pool's claim.
  identity = merge(
    { for key in keys(local.functions) : key => key },
    { for key in keys(local.pool_functions) : key => "claim" },
  )
  # What a pool's claim is told beyond reclaim_env (local/cloud.py pool_env says the
  # same); a pool whose runner is "job" also gets its Cloud Run job (run_jobs.tf).
  pool_env = merge(
    { for key in keys(local.functions) : key => {} },
    {
      for name, p in local.pools : "claim_${name}" => merge({
        RECLAIM_POOL                  = name
        RECLAIM_MAX_CONCURRENT        = tostring(p.concurrency)
        RECLAIM_STALE_SECONDS         = tostring(p.stale_seconds)
        RECLAIM_PUSH_DEADLINE_SECONDS = tostring(p.ack_deadline_seconds)
        }, p.runner != "job" ? {} : {
        RECLAIM_RUNNER  = "job"
        RECLAIM_RUN_JOB = local.run_jobs[name]
        RECLAIM_RUN_API = "https://run.googleapis.com"
      })
    },
  )

  # Plan-time checks of the file, the functions' own at start being exact.
  pool_field_names = ["pipelines", "memory", "cpu", "concurrency", "timeout_seconds", "min_instances", "max_instances", "stale_seconds", "ack_deadline_seconds", "max_delivery_attempts", "runner", "job"]
  pool_pipelines   = flatten([for name, p in local.pools : p.pipelines])
  pool_problems = flatten([
    can(keys(local.pools_declared)) ? [] : ["\"pools\" must be an object: pool name -> pool"],
    !local.pools_found || local.pools_inside ? [] : ["the pools file must be inside the pipelines package (${local.pipelines_dir}): the functions read it from their archive"],
    [
      for name, p in local.pools : concat(
        can(regex("^[a-z][a-z0-9]*(-[a-z0-9]+)*$", name)) && length(name) <= 20 ? [] : ["pool ${name}: a name is lowercase letters, digits and single hyphens, starting with a letter, at most 20 characters"],
        name == "default" ? ["pool default is implicit (every pipeline no pool names): give your pool another name"] : [],
        [for k in keys(local.pools_declared[name]) : "pool ${name}: unknown field ${k}" if !contains(local.pool_field_names, k)],
        length(p.pipelines) > 0 ? [] : ["pool ${name}: pipelines must be a non-empty list of pipeline names"],
        [for pl in distinct(p.pipelines) : "pipeline ${pl} is in two pools: a pipeline runs in one pool" if length([for q in local.pool_pipelines : q if q == pl]) > 1],
        p.concurrency >= 1 && p.concurrency <= 1000 ? [] : ["pool ${name}: concurrency must be 1..1000"],
        p.concurrency == 1 || tonumber(p.cpu) >= 1 ? [] : ["pool ${name}: concurrency > 1 needs cpu >= 1"],
        p.timeout_seconds >= 10 && p.timeout_seconds <= 3600 ? [] : ["pool ${name}: timeout_seconds must be 10..3600"],
        p.ack_deadline_seconds >= 10 && p.ack_deadline_seconds <= 600 ? [] : ["pool ${name}: ack_deadline_seconds must be 10..600"],
        p.timeout_seconds >= p.ack_deadline_seconds ? [] : ["pool ${name}: timeout_seconds must be >= ack_deadline_seconds"],
        p.max_delivery_attempts >= 5 && p.max_delivery_attempts <= 100 ? [] : ["pool ${name}: max_delivery_attempts must be 5..100"],
        p.min_instances >= 0 && p.min_instances <= p.max_instances && p.max_instances >= 1 ? [] : ["pool ${name}: need 0 <= min_instances <= max_instances and max_instances >= 1"],
        p.stale_seconds >= 3 ? [] : ["pool ${name}: stale_seconds must be >= 3"],
        contains(["push", "job"], p.runner) ? [] : ["pool ${name}: runner must be push or job"],
        p.job == null || p.runner == "job" ? [] : ["pool ${name}: job sizing is only for runner job"],
      )
    ],
  ])
}

# Every function may ring every pool's doorbell, as iam.tf's fn_rings_jobs lets it ring
# the default pool's (submit, the sweep's re-rings, a claim's hand-back or send-on).
resource "google_pubsub_topic_iam_member" "fn_rings_pools" {
  for_each = {
    for pair in setproduct(keys(local.functions), keys(local.pool_topics)) : "${pair[0]}:${pair[1]}" => pair
  }

  project = var.project_id
  topic   = google_pubsub_topic.topics[each.value[1]].name
  role    = "roles/pubsub.publisher"
  member  = "serviceAccount:${google_service_account.fn[each.value[0]].email}"
}
