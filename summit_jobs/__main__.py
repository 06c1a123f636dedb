from summit_jobs.main import main

main()
