#!/bin/bash
# alternate concurrent and serial compiles, one core
cd /tmp
for r in 1 2 3 4; do for row in pqn-Breakout-MinAtar sac-Pendulum-v1 ppo-CartPole-v1; do for v in conc serial; do
 if [ $v = serial ]; then export JS_SERIAL=1; else unset JS_SERIAL; fi
 out=/tmp/ser/b_${row}_${v}_$r
 taskset -c 0 jaxspreeze score --rows $row --seeds 1 --sides jaxspreeze --no-warm --out $out > $out.log 2>&1
 python -c "
import json;d=json.load(open('$out/score.json'));x=d['runs'][0];r=x['row']
print('$row $v $r', round(r['compile_s'],2), round(r.get('command_to_threshold_s') or -1,2), round(x['process_s'],2), round(x['load_start'],2), flush=True)"
done; done; done
