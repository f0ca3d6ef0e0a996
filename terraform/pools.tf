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
  pool_names     = try(keys(local.pools_declared), []) # none unless "pools" is an object
  # Every field but pipelines defaults to claim's own (claim_function, claim_push,
  # queue.stale_seconds): a pool that names only pipelines is today's claim, apart. A field
  # of the wrong type is kept as written: pool_problems refuses it, naming it.
  pools = {
    for name in local.pool_names : name => {
      pipelines             = try([for s in local.pools_declared[name].pipelines : tostring(s)], [])
      memory                = try(local.pools_declared[name].memory, var.claim_function.memory)
      cpu                   = try(local.pools_declared[name].cpu, var.claim_function.cpu)
      concurrency           = try(local.pools_declared[name].concurrency, var.claim_function.concurrency)
      timeout_seconds       = try(local.pools_declared[name].timeout_seconds, var.claim_function.timeout_seconds)
      min_instances         = try(local.pools_declared[name].min_instances, var.claim_function.min_instances)
      max_instances         = try(local.pools_declared[name].max_instances, var.claim_function.max_instances)
      stale_seconds         = try(local.pools_declared[name].stale_seconds, var.queue.stale_seconds)
      ack_deadline_seconds  = try(local.pools_declared[name].ack_deadline_seconds, var.claim_push.ack_deadline_seconds)
      max_delivery_attempts = try(local.pools_declared[name].max_delivery_attempts, var.claim_push.max_delivery_attempts)
      runner                = try(local.pools_declared[name].runner, "push")
      job                   = try(local.pools_declared[name].job, null)
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

  # Plan-time checks of the file: every check shared/pools.py makes at start, so the plan
  # takes exactly what the functions take (tests/terraform/test_tf_pools.py runs the same
  # GOOD and BAD files through both). A whole number is `v == tonumber(v)` (a number, not
  # a string or a bool) with no fraction; a string is `v == tostring(v)`. The job object's
  # checks are run_jobs.tf's pool_job_problems.
  pool_field_names = ["pipelines", "memory", "cpu", "concurrency", "timeout_seconds", "min_instances", "max_instances", "stale_seconds", "ack_deadline_seconds", "max_delivery_attempts", "runner", "job"]
  pool_pipelines   = flatten([for name, p in local.pools : p.pipelines])
  pool_ints = {
    concurrency           = [1, 1000]
    timeout_seconds       = [10, 3600]
    min_instances         = [0, 1000]
    max_instances         = [1, 1000]
    ack_deadline_seconds  = [10, 600]
    max_delivery_attempts = [5, 100]
  }
  pool_problems = flatten([
    can(keys(local.pools_doc)) && try(alltrue([for k in keys(local.pools_doc) : k == "pools"]), false) ? [] : ["the pools file must be an object with one key, \"pools\""],
    can(keys(local.pools_declared)) ? [] : ["\"pools\" must be an object: pool name -> pool"],
    !local.pools_found || local.pools_inside ? [] : ["the pools file must be inside the pipelines package (${local.pipelines_dir}): the functions read it from their archive"],
    [
      for name, p in local.pools : concat(
        can(regex("^[a-z][a-z0-9]*(-[a-z0-9]+)*$", name)) && length(name) <= 20 ? [] : ["pool ${name}: a name is lowercase letters, digits and single hyphens, starting with a letter, at most 20 characters"],
        name == "default" ? ["pool default is implicit (every pipeline no pool names): give your pool another name"] : [],
        can(keys(local.pools_declared[name])) ? [] : ["pool ${name}: a pool must be an object"],
        [for k in try(keys(local.pools_declared[name]), []) : "pool ${name}: unknown field ${k}" if !contains(local.pool_field_names, k)],
        try(length(local.pools_declared[name].pipelines) > 0 && can(local.pools_declared[name].pipelines[0]) && alltrue([
          for s in local.pools_declared[name].pipelines : s == tostring(s) && length(s) > 0
        ]), false) ? [] : ["pool ${name}: pipelines must be a non-empty list of pipeline names"],
        length(distinct(p.pipelines)) == length(p.pipelines) ? [] : ["pool ${name}: pipelines lists a pipeline twice"],
        [for pl in distinct(p.pipelines) : "pipeline ${pl} is in two pools: a pipeline runs in one pool" if length([for q in local.pool_pipelines : q if q == pl]) > 1],
        [
          for f, bounds in local.pool_ints : "pool ${name}: ${f} must be a whole number within ${bounds[0]}..${bounds[1]}"
          if !try(p[f] == tonumber(p[f]) && floor(p[f]) == p[f] && p[f] >= bounds[0] && p[f] <= bounds[1], false)
        ],
        try(p.memory == tostring(p.memory) && can(regex("^[1-9][0-9]*(Mi|Gi)$", p.memory)), false) ? [] : ["pool ${name}: memory must be like \"1Gi\" or \"512Mi\""],
        try(p.cpu == tostring(p.cpu) && can(regex("^([1-9][0-9]*|0\\.[0-9]+)$", p.cpu)), false) ? [] : ["pool ${name}: cpu must be like \"1\" or \"0.5\""],
        try(p.concurrency == 1 || tonumber(p.cpu) >= 1, true) ? [] : ["pool ${name}: concurrency > 1 needs cpu >= 1"],
        try(p.timeout_seconds >= p.ack_deadline_seconds, true) ? [] : ["pool ${name}: timeout_seconds must be >= ack_deadline_seconds"],
        try(p.min_instances <= p.max_instances, true) ? [] : ["pool ${name}: min_instances must not exceed max_instances"],
        try(p.stale_seconds == tonumber(p.stale_seconds) && p.stale_seconds >= 3, false) ? [] : ["pool ${name}: stale_seconds must be a number >= 3"],
        try(contains(["push", "job"], p.runner), false) ? [] : ["pool ${name}: runner must be push or job"],
        !contains(try(keys(local.pools_declared[name]), []), "job") || p.runner == "job" ? [] : ["pool ${name}: job sizing is only for runner job"],
      )
    ],
    local.pool_job_problems, # run_jobs.tf
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
