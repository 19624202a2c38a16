//! The web UI in a real browser: headless Chromium driven over WebDriver
//! (Debian's `chromium` and `chromium-driver`, through `fantoccini`),
//! against the real binary serving real jobs and upstream's logs.
//!
//! Each page the tests visit is also saved as a screenshot (see
//! `Browser::shot`).

use crate::browser::Browser;
use crate::harness::*;
use fantoccini::Locator;

/// A join of `t` with itself: three stages, one with two inputs.
const JOIN: &str = "SELECT a.k, count(*) FROM t a JOIN t b ON a.k = b.k GROUP BY a.k";

const HOSTILE_NAME: &str = "<script>window.pwned=1</script> nightly <b>report</b>";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[cfg_attr(
    no_chromium,
    ignore = "chromium and chromium-driver (Debian) are not installed"
)]
async fn the_pages_show_real_jobs_in_a_browser() {
    let mut cluster = Cluster::start(&[]).await;
    let sched = &cluster.sched;
    let named = client_with(
        sched.port,
        &cluster.data,
        &[("ballista.job.name", HOSTILE_NAME)],
    )
    .await;
    let (ok_job, ok) = run_job(
        sched,
        &named,
        "SELECT '<script>window.pwned=2</script>' AS s, k, count(*) AS n, sum(v) AS total \
         FROM t GROUP BY k ORDER BY k",
    )
    .await;
    assert_eq!(ok, Ok(100));
    let (failed_job, failed) = run_job(sched, &cluster.ctx, "SELECT CAST(s AS INT) FROM t").await;
    assert!(failed.is_err(), "the cast fails");
    let (join_job, joined) = run_job(sched, &cluster.ctx, JOIN).await;
    assert_eq!(joined, Ok(100));
    for id in [&ok_job, &failed_job, &join_job] {
        completed_log(&cluster.logs, id).await;
    }

    let b = Browser::start().await;

    // The list: the same jobs as the API, newest first.
    b.open(&sched.url("/")).await;
    let listed = b.texts("table.jobs tbody td.id").await;
    assert_eq!(listed, job_ids_where(sched, "").await);
    assert_eq!(listed.len(), 3);
    // The hostile name is text, never markup, and no script of it ran.
    let names = b.texts("table.jobs tbody td.name").await;
    assert!(names.contains(&HOSTILE_NAME.to_string()), "{names:?}");
    assert_eq!(b.js("return window.pwned === undefined;").await, true);
    assert_eq!(
        b.js("return document.querySelectorAll('main b, main script').length;")
            .await,
        0
    );
    // Counts per status, as the API counts them.
    let counts = b.texts("nav.counts a").await;
    assert!(counts.iter().any(|c| c == "All 3"), "{counts:?}");
    assert!(counts.iter().any(|c| c == "Failed 1"), "{counts:?}");
    assert!(counts.iter().any(|c| c == "Completed 2"), "{counts:?}");
    b.shot("jobs").await;

    // Filters: the form's status choice becomes the URL and the list.
    b.click(Locator::Css("select[name=status] option[value=failed]"))
        .await;
    b.click(Locator::Css("form.filters button[type=submit]"))
        .await;
    b.until(
        "the filtered list",
        "location.search.includes('status=failed')",
    )
    .await;
    assert_eq!(
        b.texts("table.jobs tbody td.id").await,
        std::slice::from_ref(&failed_job)
    );
    // A name search.
    b.open(&sched.url("/?name=NIGHTLY")).await;
    assert_eq!(
        b.texts("table.jobs tbody td.id").await,
        std::slice::from_ref(&ok_job)
    );

    // Paging by cursor: next, next, previous, as the API pages.
    let order = job_ids_where(sched, "").await;
    b.open(&sched.url("/?limit=1")).await;
    assert_eq!(b.texts("table.jobs tbody td.id").await, [order[0].clone()]);
    b.click(Locator::Css("a[rel=next]")).await;
    b.until("page 2", "location.search.includes('after=')")
        .await;
    assert_eq!(b.texts("table.jobs tbody td.id").await, [order[1].clone()]);
    b.click(Locator::Css("a[rel=next]")).await;
    b.until(
        "page 3",
        &format!(
            "document.querySelector('td.id').textContent === '{}'",
            order[2]
        ),
    )
    .await;
    b.click(Locator::Css("a[rel=prev]")).await;
    b.until("back to page 2", "location.search.includes('before=')")
        .await;
    assert_eq!(b.texts("table.jobs tbody td.id").await, [order[1].clone()]);
    // The browser's back button returns to the page before.
    b.client.back().await.unwrap();
    b.until(
        "back",
        &format!(
            "document.querySelector('td.id').textContent === '{}'",
            order[2]
        ),
    )
    .await;

    // A job page: one click from the list.
    b.open(&sched.url("/")).await;
    b.click(Locator::LinkText(&join_job)).await;
    b.until("the job page", "location.pathname.startsWith('/ui/job/')")
        .await;
    assert_eq!(b.location().await, format!("/ui/job/{join_job}"));
    let stages = get_json(&sched.url(&format!("/api/job/{join_job}/stages"))).await;
    let stages = stages["stages"].as_array().unwrap();
    let mut stage_ids: Vec<String> = stages
        .iter()
        .map(|s| format!("Stage {}", s["stage_id"].as_str().unwrap()))
        .collect();
    stage_ids.sort();
    let mut rows = b.texts("table.stages tbody td:first-child").await;
    rows.sort();
    assert_eq!(rows, stage_ids, "one stage row per stage of the API");
    // The graph: one linked box per stage, and the join's edges.
    let boxes = b
        .js("return document.querySelectorAll('svg.graph a').length;")
        .await;
    assert_eq!(boxes, stages.len());
    let edges = b
        .js("return document.querySelectorAll('svg.graph path.edge').length;")
        .await;
    assert!(
        edges.as_u64().unwrap() >= 2,
        "a join has two inputs: {edges}"
    );
    // Task counts per stage, as the scheduler counted its tasks.
    for s in stages {
        let id = s["stage_id"].as_str().unwrap();
        let tasks = s["tasks"].as_array().unwrap().len();
        let row = b
            .js(&format!(
                "return [...document.querySelectorAll('table.stages tbody tr')]\
                 .find(r => r.cells[0].textContent === 'Stage {id}').cells[2].textContent;"
            ))
            .await;
        assert_eq!(row, tasks.to_string(), "stage {id}");
    }
    // The timeline is drawn, with a legend entry per stage.
    b.until(
        "the timeline",
        "document.getElementById('timeline').dataset.drawn === 'true'",
    )
    .await;
    let canvas_height = b
        .js("return document.querySelector('#timeline canvas').height;")
        .await;
    assert!(canvas_height.as_u64().unwrap() > 30, "{canvas_height}");
    assert_eq!(
        b.texts("#timeline .legend span:not(.swatch)").await.len(),
        stages.len() + 1
    );
    b.shot("job").await;

    // The raw log download equals the file on disk.
    let file = std::fs::read_to_string(cluster.logs.join(format!("{join_job}.eventlog"))).unwrap();
    let href = b
        .client
        .find(Locator::Css("a[download]"))
        .await
        .unwrap()
        .attr("href")
        .await
        .unwrap()
        .unwrap();
    let downloaded = b
        .client
        .execute_async(
            "fetch(arguments[0]).then(r => r.text()).then(arguments[1]);",
            vec![serde_json::json!(href)],
        )
        .await
        .unwrap();
    assert_eq!(downloaded.as_str().unwrap(), file);

    // Tabs: profile, plans, config, diagnosis. The profile frames every
    // stage around its operators, and outlines the ones with most compute.
    b.click(Locator::LinkText("Profile")).await;
    b.until("profile", "location.search.includes('tab=profile')")
        .await;
    let frames = b
        .js("return document.querySelectorAll('svg.graph.frames rect.frame').length;")
        .await;
    assert_eq!(frames, stages.len());
    let hot = b
        .js("return document.querySelectorAll('svg.graph.frames rect.hot').length;")
        .await;
    assert!((1..=3).contains(&hot.as_u64().unwrap()), "{hot}");
    let figures = b
        .js("return [...document.querySelectorAll('svg.graph.frames text')].map(t => t.textContent).join('|');")
        .await;
    assert!(
        figures.as_str().unwrap().contains("% of the job)"),
        "{figures}"
    );
    b.shot("profile").await;
    b.click(Locator::LinkText("Plans")).await;
    b.until("plans", "location.search.includes('tab=plans')")
        .await;
    let plans = b.texts("pre.plan").await;
    assert!(
        plans.iter().any(|p| p.contains("HashJoinExec")),
        "{plans:?}"
    );
    b.shot("plans").await;
    b.click(Locator::LinkText("Config")).await;
    b.until("config", "location.search.includes('tab=config')")
        .await;
    let config = get_json(&sched.url(&format!("/api/job/{join_job}/config"))).await;
    assert_eq!(
        b.texts("#config-table tbody tr").await.len(),
        config.as_object().unwrap().len()
    );
    b.client
        .find(Locator::Id("config-filter"))
        .await
        .unwrap()
        .send_keys("batch_size")
        .await
        .unwrap();
    let visible = b
        .js("return [...document.querySelectorAll('#config-table tbody tr')].filter(r => !r.hidden).length;")
        .await;
    let expected = config
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, v)| k.contains("batch_size") || v.to_string().contains("batch_size"))
        .count();
    assert_eq!(visible, expected);
    b.click(Locator::LinkText("Diagnosis")).await;
    b.until("diagnosis", "location.search.includes('tab=diagnosis')")
        .await;
    let api = get_json(&sched.url(&format!("/api/job/{join_job}/diagnosis"))).await;
    assert_eq!(
        b.texts("article.finding").await.len(),
        api["findings"].as_array().unwrap().len()
    );
    b.shot("diagnosis").await;
    // The What-if tab: the API's curve, drawn point for point and listed.
    b.click(Locator::LinkText("What if")).await;
    b.until("what if", "location.search.includes('tab=whatif')")
        .await;
    let whatif = get_json(&sched.url(&format!("/api/job/{join_job}/whatif"))).await;
    let points = whatif["curve"].as_array().unwrap().len();
    assert!(points >= 1, "{whatif:#}");
    assert_eq!(b.texts("#whatif-table tbody tr").await.len(), points);
    let drawn = b
        .js("return document.querySelectorAll('#whatif-curve circle.predicted').length;")
        .await;
    assert_eq!(drawn, points);
    let knee = b
        .js("return document.querySelectorAll('#whatif-curve circle.knee').length;")
        .await;
    assert_eq!(knee, usize::from(!whatif["knee"].is_null()));
    b.shot("whatif").await;

    // A stage page: from the graph.
    b.open(&sched.url(&format!("/ui/job/{join_job}"))).await;
    let first = &stages[0];
    let id = first["stage_id"].as_str().unwrap();
    b.click(Locator::Css(&format!("svg.graph a[href$='/stage/{id}']")))
        .await;
    b.until(
        "the stage page",
        &format!("location.pathname.endsWith('/stage/{id}')"),
    )
    .await;
    assert_eq!(
        b.texts("table.tasks tbody tr").await.len(),
        first["tasks"].as_array().unwrap().len()
    );
    // The summary's max duration is the tasks' longest, as upstream says.
    let durations = b.texts("table.quantiles tbody tr:first-child td.num").await;
    assert_eq!(durations.len(), 5);
    b.shot("stage").await;

    // A failed job shows why.
    b.open(&sched.url(&format!("/ui/job/{failed_job}"))).await;
    let why = b.text(".error-box").await;
    assert!(why.contains("Cannot cast") || why.contains("cast"), "{why}");
    b.shot("failed-job").await;

    // The SQL with <script> is shown as text in the plans.
    b.open(&sched.url(&format!("/ui/job/{ok_job}?tab=plans")))
        .await;
    let plans = b.texts("pre.plan").await.join("\n");
    assert!(plans.contains("<script>window.pwned=2</script>"), "{plans}");
    assert_eq!(b.js("return window.pwned === undefined;").await, true);
    assert_eq!(b.text("p.job-name").await, HOSTILE_NAME);

    // Bad addresses and parameters: a page that says what is wrong.
    for (path, status, says) in [
        (
            "/ui/job/no%3Cb%3Esuch%3C%2Fb%3E",
            404,
            "No job \"no<b>such</b>\" here",
        ),
        ("/?status=bogus", 400, "parameter `status`"),
        ("/?limit=0", 400, "parameter `limit`"),
        ("/?range=2w", 400, "parameter `range`"),
        ("/?after=nope", 400, "parameter `after`"),
        ("/ui/job/x/stage/abc", 400, "not a stage id"),
        ("/ui/job/x?tab=nope", 400, "parameter `tab`"),
        ("/ui/nothing/here", 404, "no page at this address"),
    ] {
        let (code, body, _) = get(&sched.url(path)).await;
        assert_eq!(code, status, "{path}: {body}");
        b.open(&sched.url(path)).await;
        let shown = b.text("main").await;
        assert!(shown.contains(says), "{path}: {shown}");
        assert_eq!(
            b.js("return document.querySelectorAll('main b').length;")
                .await,
            0,
            "{path}"
        );
    }

    // A second run of the join: the job page links the comparison with
    // the first, and the recurring queries group the two.
    let (again, joined) = run_job(sched, &cluster.ctx, JOIN).await;
    assert_eq!(joined, Ok(100));
    completed_log(&cluster.logs, &again).await;
    b.open(&sched.url(&format!("/ui/job/{again}"))).await;
    b.click(Locator::LinkText("Compare with previous run"))
        .await;
    b.until("the comparison", "location.pathname === '/ui/compare'")
        .await;
    assert_eq!(
        b.location().await,
        format!("/ui/compare?a={join_job}&b={again}")
    );
    let api = get_json(&sched.url(&format!("/api/compare?a={join_job}&b={again}"))).await;
    assert_eq!(api["same_query"], true);
    assert!(
        b.text("main")
            .await
            .contains("Both runs ran the same query")
    );
    assert_eq!(
        b.js("return document.querySelectorAll('main table')[1].tBodies[0].rows.length;")
            .await,
        api["stages"].as_array().unwrap().len()
    );
    b.shot("compare").await;
    b.open(&sched.url("/ui/queries")).await;
    let api = get_json(&sched.url("/api/queries")).await;
    let rows = b.texts("main table tbody tr").await;
    assert_eq!(rows.len(), api["queries"].as_array().unwrap().len());
    // One scheduler ran them all (the API says so): no column for it.
    let ids: std::collections::BTreeSet<&str> = api["queries"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|q| q["scheduler_ids"].as_array().unwrap())
        .map(|id| id.as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 1, "{api}");
    assert!(b.texts("td.scheduler").await.is_empty());
    let hash = api["queries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["runs"] == 2)
        .expect("the join ran twice")["query_hash"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(rows.iter().any(|r| r.starts_with(&hash)), "{rows:?}");
    b.shot("queries").await;

    // SQL: an example question from the page, answered as the API does.
    b.open(&sched.url("/ui/sql")).await;
    b.click(Locator::Css("ul.examples a")).await;
    b.until(
        "the answer",
        "document.querySelector('table.result') !== null",
    )
    .await;
    let q = b
        .js("return new URLSearchParams(location.search).get('q');")
        .await;
    let api: Vec<serde_json::Value> = http_client()
        .post(sched.url("/api/sql"))
        .header("content-type", "application/sql")
        .body(q.as_str().unwrap().to_string())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(b.texts("table.result tbody tr").await.len(), api.len());
    b.shot("sql").await;

    // Live: a running job refreshes the list on its own until it ends.
    let heavy = spawn_heavy(&cluster.ctx);
    let running: String = wait_for("the heavy job runs", || async {
        get_json(&sched.url("/api/jobs?status=running"))
            .await
            .as_array()
            .unwrap()
            .first()
            .map(|j| j["job_id"].as_str().unwrap().to_string())
    })
    .await;
    // Its page says it runs, refreshes itself and draws what has run.
    b.open(&sched.url(&format!("/ui/job/{running}"))).await;
    assert_eq!(b.js("return document.body.dataset.refresh;").await, "5");
    assert_eq!(b.text("dl.facts dd").await, "Running");
    b.until(
        "the timeline",
        "document.getElementById('timeline').dataset.drawn === 'true'",
    )
    .await;
    b.open(&sched.url("/")).await;
    assert_eq!(b.js("return document.body.dataset.refresh;").await, "5");
    assert!(b.text("p.live").await.contains("refreshes"));
    let reply = http_client()
        .patch(sched.url(&format!("/api/job/{running}")))
        .send()
        .await
        .unwrap();
    assert!(reply.status().is_success());
    // No reload: the script swaps in the new list, where the job has
    // ended (the scheduler's list words a cancelled job as it likes).
    b.js("window.sameDocument = true;").await;
    b.until(
        "the list shows the job ended",
        &format!(
            "[...document.querySelectorAll('table.jobs tbody tr')].some(r => \
             r.cells[0].textContent === '{running}' && \
             !['Running', 'Queued'].includes(r.cells[2].textContent))"
        ),
    )
    .await;
    b.until("the refresh stops", "!document.body.dataset.refresh")
        .await;
    assert_eq!(b.js("return window.sameDocument === true;").await, true);
    let _ = heavy.await;
    cluster.sched.terminate();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[cfg_attr(
    no_chromium,
    ignore = "chromium and chromium-driver (Debian) are not installed"
)]
async fn the_pages_ask_for_the_token_once() {
    let tmp = tempfile::tempdir().unwrap();
    let logs = tmp.path().join("logs");
    crate::history::copy_fixtures(&logs);
    let token_file = tmp.path().join("token");
    std::fs::write(&token_file, "s3cret;token\n").unwrap();
    let mut server = Proc::history(&logs, &["--api-token-file", token_file.to_str().unwrap()]);
    server.wait_healthy().await;
    // Without the token, nothing of a job reaches a plain client.
    for path in [
        "/",
        "/ui/job/golden-v1",
        "/ui/job/golden-v1/eventlog",
        "/api/jobs",
    ] {
        let reply = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap()
            .get(server.url(path))
            .send()
            .await
            .unwrap();
        let code = reply.status().as_u16();
        let body = reply.text().await.unwrap();
        assert!(matches!(code, 303 | 401), "{path}: {code}");
        assert!(
            !body.contains("golden") && !body.contains("tpch"),
            "{path}: {body}"
        );
    }

    let b = Browser::start().await;
    b.open(&server.url("/ui/job/golden-v1?tab=config")).await;
    assert_eq!(
        b.location().await,
        "/ui/login?next=%2Fui%2Fjob%2Fgolden-v1%3Ftab%3Dconfig"
    );
    assert!(b.text("main").await.contains("--api-token-file"));
    b.shot("login").await;
    let field = b.client.find(Locator::Id("token")).await.unwrap();
    field.send_keys("wrong").await.unwrap();
    field.send_keys("\n").await.unwrap();
    b.until(
        "the refusal",
        "document.querySelector('.error-box') !== null",
    )
    .await;
    assert!(b.text(".error-box").await.contains("not the one"));
    let field = b.client.find(Locator::Id("token")).await.unwrap();
    field.send_keys("s3cret;token\n").await.unwrap();
    b.until(
        "the page asked for",
        "location.pathname === '/ui/job/golden-v1'",
    )
    .await;
    assert!(b.location().await.ends_with("tab=config"));
    // Every page now, without asking again.
    b.open(&server.url("/")).await;
    assert_eq!(b.texts("table.jobs tbody tr").await.len(), 6);
    b.open(&server.url("/ui/job/golden-v1")).await;
    b.until(
        "the timeline",
        "document.getElementById('timeline').dataset.drawn === 'true'",
    )
    .await;
    // The cookie is the pages' alone: the API still wants the header, and
    // scripts cannot read the token.
    let status = b
        .client
        .execute_async(
            "fetch('/api/jobs').then(r => arguments[0](r.status));",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(status, 401);
    assert_eq!(b.js("return document.cookie;").await, "");
    // Forgetting the token signs out.
    b.click(Locator::Css("button.link")).await;
    b.until("signed out", "location.pathname === '/ui/login'")
        .await;
    b.open(&server.url("/")).await;
    assert!(b.location().await.starts_with("/ui/login"));
    server.terminate();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[cfg_attr(
    no_chromium,
    ignore = "chromium and chromium-driver (Debian) are not installed"
)]
async fn upstream_logs_are_browsable() {
    let tmp = tempfile::tempdir().unwrap();
    crate::history::copy_fixtures(tmp.path());
    let mut server = Proc::history(tmp.path(), &[]);
    server.wait_healthy().await;
    let b = Browser::start().await;
    for job in job_ids_where(&server, "").await {
        b.open(&server.url(&format!("/ui/job/{job}"))).await;
        b.until(
            "the timeline",
            "document.getElementById('timeline').dataset.drawn === 'true'",
        )
        .await;
        // The stage table has a row per stage upstream's answer lists.
        let stages = get_json(&server.url(&format!("/api/job/{job}/stages"))).await;
        let n = stages["stages"].as_array().map_or(0, Vec::len);
        assert!(
            b.texts("table.stages tbody tr").await.len() >= n,
            "{job}: {n} stages"
        );
        let status = get_json(&server.url(&format!("/api/job/{job}"))).await;
        if status["status"] == "Failed" {
            assert!(b.text(".error-box").await.contains("Cannot cast"), "{job}");
        }
    }
    // The golden log's failed attempt is outlined: the timeline knows it.
    let data = get_json(&server.url("/ui/job/golden-v1/timeline.json")).await;
    assert_eq!(
        data["failed"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| *f == 1)
            .count(),
        1
    );
    server.terminate();
}

/// The What-if accuracy page over four runs of one query on one shape,
/// alternately held up by a straggler (`explain`'s planted log): the API's
/// pairs and queries row for row, the query marked unreliable, and a
/// pair's later run opening on its What-if tab, which warns.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[cfg_attr(
    no_chromium,
    ignore = "chromium and chromium-driver (Debian) are not installed"
)]
async fn the_accuracy_page_grades_the_replays_in_a_browser() {
    let tmp = tempfile::tempdir().unwrap();
    for (i, slow) in [2_000u64, 30_000, 2_000, 30_000].iter().enumerate() {
        crate::explain::write_straggler_log(tmp.path(), &format!("run{i}"), *slow);
    }
    let mut server = Proc::history(tmp.path(), &[]);
    server.wait_ready().await;
    let graded = get_json(&server.url("/api/whatif/accuracy")).await;
    let b = Browser::start().await;
    b.open(&server.url("/")).await;
    b.click(Locator::LinkText("What-if accuracy")).await;
    b.until("the page", "location.pathname === '/ui/accuracy'")
        .await;
    let pairs = b.texts("#accuracy-pairs tbody tr").await;
    assert_eq!(pairs.len(), graded["pairs"].as_array().unwrap().len());
    assert_eq!(pairs.len(), 3);
    let queries = b.texts("#accuracy-queries tbody tr").await;
    assert_eq!(queries.len(), 1);
    assert!(queries[0].contains("unreliable"), "{queries:?}");
    let median = graded["queries"][0]["all"]["median_error"]
        .as_f64()
        .unwrap();
    assert!(
        queries[0].contains(&format!("{:.1}%", median * 100.0)),
        "{queries:?}"
    );
    b.shot("accuracy").await;
    b.click(Locator::Css(
        "#accuracy-pairs tbody tr:first-child td:nth-child(2) a",
    ))
    .await;
    b.until(
        "the later run's What-if tab",
        "location.search.includes('tab=whatif')",
    )
    .await;
    let warning = b.texts("#whatif-unreliable").await;
    assert_eq!(warning.len(), 1);
    assert!(
        warning[0].starts_with("Unreliable for this query"),
        "{warning:?}"
    );
}
